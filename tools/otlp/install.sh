#!/usr/bin/env bash
# Installs the OTLP decoder of the tests (tools/otlp/decode.py): PyPI's opentelemetry-proto, pinned, with the
# protobuf runtime it was built for, into /opt/rprof-tests/otlp-proto (a --target directory: nothing goes into
# the system's Python). Needs python3 >= 3.10 and pip.
set -euo pipefail
dest=/opt/rprof-tests/otlp-proto
if PYTHONPATH=$dest python3 -c 'import opentelemetry.proto.version as v; assert v.__version__ == "1.45.2"' 2>/dev/null; then
    exit 0
fi
python3 -m pip install -q --disable-pip-version-check --target "$dest" --upgrade \
    opentelemetry-proto==1.45.2 protobuf==7.36.2
