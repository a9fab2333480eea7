#!/usr/bin/env bash
# A user's clone has nothing beside it: no tracked file outside docs/ may refer to the developers'
# reference folder one level above the checkout (the data the tests need lives in tests/fixtures/).
# Run by tests/run-all.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
pattern='\.\./shared'
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  hits=$(git grep -n -E "$pattern" -- . ':!docs/' || true)
else
  hits=$(grep -rn -E "$pattern" --exclude-dir=docs --exclude-dir=target --exclude-dir=.git \
           --exclude-dir=node_modules --exclude-dir=.venv . || true)
fi
if [ -n "$hits" ]; then
  echo "self-contained check: these files refer to a folder outside the repository (copy the data into tests/fixtures/):" >&2
  echo "$hits" >&2
  exit 1
fi
echo "self-contained check: no tracked file outside docs/ refers to a folder beside the checkout"
