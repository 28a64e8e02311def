# Sourced by the GPU scripts (repository root as the working directory): installs the wheels of
# `mucutlass wheelhouse` from .whl/ (when there are any) into /tmp/site and puts it, the checkout and nvcc on the
# paths. Returns 1 when an install fails, so the caller can stop with its own log line.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || return 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/cuda/bin
