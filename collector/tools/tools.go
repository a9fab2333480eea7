//go:build tools

package tools

import _ "go.opentelemetry.io/collector/cmd/mdatagen"
