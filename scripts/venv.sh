# Sourced by scripts/demo.sh and scripts/test.sh: virtual environments on a fresh Debian machine.

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# apt_install PACKAGE...: installs those not installed yet, updating the package lists once.
apt_install() {
    local missing=()
    for package in "$@"; do
        dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "== installing Debian packages: ${missing[*]}"
        as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# ensure_cpython_venv DIR SPEC: a venv of python3 at DIR with `pip install -e SPEC`.
ensure_cpython_venv() {
    local dir=$1 spec=$2
    # Debian's own python3 ships venv and ensurepip in a package of their own
    python3 -c "import ensurepip, venv" 2>/dev/null || apt_install python3-venv
    [ -x "$dir/bin/python" ] || python3 -m venv "$dir"
    echo "== installing scaler$spec into $dir"
    "$dir/bin/python" -m pip install -q --upgrade pip
    "$dir/bin/python" -m pip install -q -e "$spec"
}
