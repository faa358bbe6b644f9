# shellcheck shell=bash
# scripts/lib.sh: helpers shared by scripts/run, scripts/test and .ci/run.
# Source it (bash); it defines functions and variables only.

# Debian packages delayq needs to build, test and run.
# shellcheck disable=SC2034 # used by the scripts that source this file
DELAYQ_PACKAGES=(build-essential autoconf automake libtool pkg-config
    libfcgi-dev libhiredis-dev libjson-c-dev libcmocka-dev libcurl4-openssl-dev libssl-dev
    nginx redis-server curl python3)
# What the tests need beyond that: the PHP client's runtime and PHPUnit;
# Debian's Laravel and Symfony Messenger (with sqlite for Laravel's
# failed_jobs table) for the framework integrations' tests; a JDK for the
# Java client (clients/java); node and chromium for the dashboard's
# browser test (tests/ui); man-db for the installed man pages' check;
# iproute2 and iptables for the nemesis' partitions
# (tests/faults/nemesis.py). Without them `make check` skips those tests
# (tests/dqtest/tools.py); scripts/test and .ci/run install them and allow
# no skip.
# shellcheck disable=SC2034
DELAYQ_TEST_PACKAGES=(php-cli php-curl phpunit composer
    php-laravel-framework php-symfony-messenger php-sqlite3 openjdk-17-jdk-headless
    maven libmaven-resources-plugin-java libmaven-compiler-plugin-java libsurefire-java
    libmaven-jar-plugin-java libmaven-source-plugin-java libmaven-javadoc-plugin-java
    libmaven-install-plugin-java nodejs chromium
    man-db iproute2 iptables)

# The browser test's npm packages, from tests/ui/package-lock.json
# (playwright-core only; it downloads no browser: the test drives Debian's
# chromium). Debian's npm is installed only when no npm is on PATH (a node
# from elsewhere brings its own).
dq_ui_test_deps() {
    if ! command -v npm >/dev/null 2>&1; then
        dq_ensure_packages npm
    fi
    dq_log "npm ci --prefix tests/ui"
    npm ci --prefix tests/ui --no-audit --no-fund --loglevel=error
}

# Messages to stderr, "NAME: text"; with DQ_TIMES set, "NAME: HH:MM:SS text".
dq_log() {
    if [ -n "${DQ_TIMES:-}" ]; then
        printf '%s: %(%T)T %s\n' "${DQ_NAME:-delayq}" -1 "$*" >&2
    else
        printf '%s: %s\n' "${DQ_NAME:-delayq}" "$*" >&2
    fi
}

dq_die() {
    dq_log "$*"
    exit 1
}

# Run a command as root: directly when we are root, else through sudo.
dq_as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        dq_die "need root (or sudo) to run: $*"
    fi
}

# True when the Debian package is installed (not merely known or removed
# with its config files left).
dq_pkg_installed() {
    dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed$'
}

# Install those of the given Debian packages that are missing (apt-get
# update first, once, and only when something is missing).
dq_ensure_packages() {
    local p missing=()
    for p in "$@"; do
        dq_pkg_installed "$p" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    dq_log "installing missing packages: ${missing[*]}"
    dq_as_root env DEBIAN_FRONTEND=noninteractive apt-get update
    dq_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
}

# Generate the build system: always (force=1) or only when configure is
# missing. aclocal needs the m4/ directory that configure.ac names.
dq_autoreconf() {
    local force=${1:-0}
    if [ "$force" = 1 ] || [ ! -x configure ]; then
        mkdir -p m4
        dq_log "autoreconf -fi"
        autoreconf -fi
    fi
}

# Configure (when no Makefile yet, or always with force=1) with the
# arguments given, then build.
dq_configure() {
    local force=$1
    shift
    if [ "$force" = 1 ] || [ ! -f Makefile ]; then
        dq_log "./configure $*"
        ./configure "$@"
    fi
}
