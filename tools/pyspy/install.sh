#!/usr/bin/env bash
# Installs py-spy from PyPI (the reference of tests/python_stacks.rs), pinned, into /opt/rprof-tests/py-spy (a
# --target directory: nothing goes into the system's Python); its binary is /opt/rprof-tests/py-spy/bin/py-spy.
# Needs python3 and pip.
set -euo pipefail
dest=/opt/rprof-tests/py-spy
version=0.4.1
if [ -x "$dest/bin/py-spy" ] && "$dest/bin/py-spy" --version 2>/dev/null | grep -qx "py-spy $version"; then
    exit 0
fi
python3 -m pip install -q --disable-pip-version-check --target "$dest" --upgrade "py-spy==$version"
