#!/usr/bin/env bash
# Installs the system packages Keysmith needs to build, test and run, when they are missing.
# Runs apt-get as root, or through sudo; otherwise says exactly what to install.
set -euo pipefail

# gdb: the test script's watchdog prints a hung test's backtraces with it.
# man-db and binutils: scripts/install.sh strips the binary and its test reads the man pages.
# libsecret-1-dev: nothing links libsecret (it is loaded on first use); LibSecretABITests compiles
# Keysmith's declarations beside its headers. It brings libsecret-1-0, which the Secret Service uses.
packages=(pkg-config libssl-dev openssl libsecret-1-dev gnome-keyring libsecret-tools dbus dbus-bin postgresql gdb git man-db binutils)

# The format test runs an independent decryptor in Python (docs/examples/decrypt_vault.py).
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import cryptography' 2>/dev/null; then
    echo "keysmith: installing the Python package cryptography for the format tests" >&2
    python3 -m pip install --quiet cryptography >&2 || packages+=(python3-cryptography)
fi
command -v python3 >/dev/null 2>&1 || packages+=(python3 python3-cryptography python3-pip python3-venv)
# The test authorization server (django-oauth-toolkit, scripts/with-oauth-server.sh) lives in a
# virtual environment: Debian's python3 makes one only with python3-venv (ensurepip).
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip, venv' 2>/dev/null; then packages+=(python3-venv); fi
# The policy tests compare every decision with Cedar's own (cedarpy, from PyPI; no Debian package).
need_cedarpy=0
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import cedarpy' 2>/dev/null; then
    need_cedarpy=1
    command -v python3 >/dev/null 2>&1 && ! python3 -m pip --version >/dev/null 2>&1 && packages+=(python3-pip)
fi

install_cedarpy() {
    [ "$need_cedarpy" -eq 1 ] || return 0
    echo "keysmith: installing the Python package cedarpy for the policy oracle tests" >&2
    python3 -m pip install --quiet cedarpy >&2 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages cedarpy >&2 \
        || { echo "keysmith: could not install cedarpy: run python3 -m pip install cedarpy" >&2; exit 1; }
}

missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    install_cedarpy
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "keysmith: missing system packages: ${missing[*]}; this script knows apt-get only: install them with your package manager" >&2
    exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo)
else
    echo "keysmith: missing system packages: ${missing[*]}" >&2
    echo "keysmith: run as root, or run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
echo "keysmith: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >&2
"${sudo[@]}" apt-get install -y -qq "${missing[@]}" >&2
install_cedarpy
