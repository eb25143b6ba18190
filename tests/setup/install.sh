#!/usr/bin/env bash
# Installs the system tools that some tests need (tests/tools.lock: etcd, the Azure CLI, Chromium, node/npm)
# when their command is missing from PATH. `make tools` runs it, and `make test` runs `make tools` first.
#
#   tests/setup/install.sh STAMP
#
# * Every command of the lock on PATH: writes STAMP (what was found) and exits. No apt at all; make does not
#   even run this script again while STAMP is newer than the lock and this script.
# * Something missing, as root with apt-get: one `apt-get update`, then `apt-get install --no-install-recommends`
#   of the missing packages at the lock's versions (no service is started meanwhile), then STAMP.
# * Cannot (not root, no apt-get, no archive reachable, a pinned version gone from the archive): one line says
#   why, STAMP.note keeps it (tests/conftest.py prints it at the end of the run, with the skip count), no STAMP
#   (the next run tries again), and exit 0: the tests that need the tool skip, as they would without this.
# A command already on PATH is used as it is, whatever its version: nothing is upgraded or downgraded.
set -uo pipefail

stamp=${1:?usage: tests/setup/install.sh STAMP}
cd "$(dirname "$0")/../.."
lock=tests/tools.lock
note=$stamp.note
log=$stamp.log
mkdir -p "$(dirname "$stamp")"
rm -f "$note"

# cmd package version: the lock's lines without comments
entries() { sed -e 's/#.*//' "$lock" | awk 'NF >= 3 { print $1, $2, $3 }'; }

missing_cmds=() specs=()
scan() {
    missing_cmds=() specs=()
    local cmd pkg version
    while read -r cmd pkg version; do
        command -v "$cmd" >/dev/null 2>&1 && continue
        missing_cmds+=("$cmd")
        if [[ $version == archive ]]; then specs+=("$pkg"); else specs+=("$pkg=$version"); fi
    done < <(entries)
}

write_stamp() {
    local cmd pkg version found
    {
        echo "# written by tests/setup/install.sh: every command of tests/tools.lock is on PATH"
        while read -r cmd pkg version; do
            found=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)
            echo "$cmd $(command -v "$cmd") ${found:-not-from-$pkg}"
        done < <(entries)
    } >"$stamp"
}

cannot() {
    echo "tools: $*; the tests that need ${missing_cmds[*]} will skip" >&2
    echo "$*" >"$note"
    exit 0
}

scan
if ((${#missing_cmds[@]} == 0)); then
    write_stamp
    exit 0
fi
echo "tools: ${missing_cmds[*]} missing from PATH: ${specs[*]} to install (tests/tools.lock)"
[[ $(id -u) == 0 ]] || cannot "not root: could not install ${specs[*]} (run make tools as root once)"
command -v apt-get >/dev/null 2>&1 || cannot "no apt-get: install ${specs[*]} by hand (tests/tools.lock)"

export DEBIAN_FRONTEND=noninteractive
apt=(apt-get -q -o DPkg::Lock::Timeout=600 -o Acquire::Retries=2 -o Acquire::http::Timeout=30)
started=$SECONDS
# no service starts during the install (etcd-server would start a system etcd on 2379 where PID 1 is systemd)
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && trap 'rm -f "$policy"' EXIT
fi
: >"$log"
"${apt[@]}" update >>"$log" 2>&1 || cannot "apt-get update failed ($(tail -n 1 "$log"))"
# apt-get update exits 0 when it reached no archive at all: then installing would only time out again
grep -qE '^(Hit|Get):' "$log" || cannot "no package archive reachable (apt-get update: $(grep -m 1 -E '^(W|E):' "$log"))"
if ! "${apt[@]}" install -y --no-install-recommends "${specs[@]}" >>"$log" 2>&1; then
    # one at a time, so that a package the archive no longer has does not keep the others out
    for spec in "${specs[@]}"; do
        "${apt[@]}" install -y --no-install-recommends "$spec" >>"$log" 2>&1 || echo "tools: apt-get install $spec failed" >&2
    done
fi
scan
if ((${#missing_cmds[@]} > 0)); then
    cannot "apt-get could not install ${specs[*]} ($(grep -E '^E:' "$log" | tail -n 1); log: $log)"
fi
write_stamp
sizes=$(sed -n -e 's/^Need to get \(.*\) of archives\.$/\1 downloaded/p' -e 's/^After this operation, \(.*\) of additional disk space will be used\.$/\1 on disk/p' "$log" | awk '{ printf "%s%s", sep, $0; sep = ", " }')
echo "tools: installed in $((SECONDS - started)) s (${sizes:-see $log}): $(grep -v '^#' "$stamp" | awk '{ printf "%s%s %s", sep, $1, $3; sep = ", " }')"
