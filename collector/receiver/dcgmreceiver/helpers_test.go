package dcgmreceiver

import (
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

type pcommonMap = pcommon.Map

// forEachPoint calls f with the attributes of every data point of md.
func forEachPoint(md pmetric.Metrics, f func(pcommon.Map)) {
	for _, rm := range md.ResourceMetrics().All() {
		for _, sm := range rm.ScopeMetrics().All() {
			for _, m := range sm.Metrics().All() {
				switch m.Type() {
				case pmetric.MetricTypeGauge:
					for _, p := range m.Gauge().DataPoints().All() {
						f(p.Attributes())
					}
				case pmetric.MetricTypeSum:
					for _, p := range m.Sum().DataPoints().All() {
						f(p.Attributes())
					}
				case pmetric.MetricTypeHistogram:
					for _, p := range m.Histogram().DataPoints().All() {
						f(p.Attributes())
					}
				case pmetric.MetricTypeExponentialHistogram:
					for _, p := range m.ExponentialHistogram().DataPoints().All() {
						f(p.Attributes())
					}
				case pmetric.MetricTypeSummary:
					for _, p := range m.Summary().DataPoints().All() {
						f(p.Attributes())
					}
				}
			}
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
