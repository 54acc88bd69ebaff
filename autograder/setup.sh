#!/usr/bin/env bash
# Gradescope runs this once, as root, to build the autograder image from the uploaded zip.
# Installs Python (3.11 where the distribution has it, else its python3, which must be 3.11-3.13),
# bubblewrap and the course package (from wheels/ in this zip, dependencies from
# PyPI; torch from the CPU wheel index so no CUDA is pulled) into $AUTOGRADER_ROOT/venv.
# TORCH_INDEX_URL names another index with the CPU wheel (a local one, say); empty means plain PyPI's torch.
# An index that cannot be reached stops this script at once (check-torch-index), before pip.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="${AUTOGRADER_ROOT:-/autograder}"
TORCH_INDEX_URL="${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}"

if [ "${AUTOGRADER_SKIP_APT:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq
  python=(python3 python3-venv)  # Ubuntu 24.04 / Debian 13: 3.12 / 3.13, and no python3.11 package
  if apt-cache show python3.11-venv >/dev/null 2>&1; then
    python=(python3.11 python3.11-venv)
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${python[@]}" bubblewrap util-linux >/dev/null
fi
PYTHON="$(command -v python3.11 || command -v python3)"
if ! "$PYTHON" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info < (3, 14))'; then
  echo "error: autograd-course needs Python 3.11, 3.12 or 3.13; $PYTHON is $("$PYTHON" -V 2>&1)" >&2
  exit 1
fi
"$PYTHON" -m venv "$ROOT/venv"
"$PYTHON" "$HERE/check-torch-index" "$TORCH_INDEX_URL"
extra=()
if [ -n "$TORCH_INDEX_URL" ]; then
  extra=(--extra-index-url "$TORCH_INDEX_URL")
fi
# the grader's install: the package's own dependencies are a student's, the grader's pins are its extra
wheel=("$HERE"/wheels/autograd_course-*.whl)
"$ROOT/venv/bin/pip" install --quiet --disable-pip-version-check --find-links "$HERE/wheels" "${extra[@]}" \
  "${wheel[0]}[grader]"
# The course's hidden tests, the variants secret (if packed) and the results stay out of reach of the
# sandbox user: everything Gradescope unpacked here becomes root's alone.
chown -R "$(id -u):$(id -g)" "$HERE"
chmod -R go-rwx "$HERE"
mkdir -p "$ROOT/results" && chmod 700 "$ROOT/results"
echo "autograd-course autograder installed in $ROOT/venv"
