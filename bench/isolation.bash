# bench/isolation.bash: what the stronger boundary costs (issue 37), sourced
# by bench/run (part of a full run, and of --only isolation). In one run,
# each contender interleaved with the others inside every run:
#
#   isolation-startup    wall time of /bin/true: airlock run --isolation
#                        namespaces and gvisor, each audited and --no-audit;
#                        bwrap; runsc --network=none do (gVisor's own floor)
#   isolation-keepalive  the keep-alive load (airlock-bench load, the client
#                        and upstream of airlock-transparent) from inside the
#                        sandbox: airlock run (audited) under namespaces and
#                        gvisor; bwrap and runsc do going direct (no proxy);
#                        direct (no sandbox) for scale
#   isolation-workload   the auditing-overhead workload (WORKLOAD, as the
#                        audit-workload case): airlock run under namespaces and
#                        gvisor, audited and --no-audit; bwrap (no record, no
#                        proxy: curl goes direct)
#
# Uses bench/run's variables and functions (log, die, note, record, BENCH,
# AIRLOCK, BIN, TMP, SAMPLES, RUN_POLICY, NGINX_PORT, SKIP, VETH_OK, ...).
# A contender that fails is marked with why (its first error), not dropped,
# and the others go on.

# The contenders that failed once: not run again, their row says why.
declare -A ISO_FAILED=()

iso_fail() { # iso_fail CASE CONTENDER WHY
    ISO_FAILED[$1/$2]=1
    log "isolation: $1, $2 failed: $3"
    note "$1" "$2" "failed: $3"
}

iso_skipped() { # iso_skipped CASE CONTENDER: true if it cannot run (noted once, at run 1)
    [[ -n ${ISO_FAILED[$1/$2]:-} ]] && return 0
    local why=""
    case $2 in
        bwrap) why=${SKIP[bwrap]:-} ;;
        runsc-do | airlock-gvisor*) why=${SKIP[runsc]:-} ;;
    esac
    [[ $1 == isolation-keepalive && $2 == runsc-do && -z $why && $VETH_OK != 1 ]] \
        && why="runsc do's sandbox cannot reach the host's loopback, and nginx's other address (the veth's 10.253.0.1) is missing: $VETH_WHY"
    [[ -z $why ]] && return 1
    ISO_FAILED[$1/$2]=1
    note "$1" "$2" "$why"
    return 0
}

# The sandbox each contender runs its command in, one word a line.
BWRAP_BASE=(bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc)
iso_wrapper() { # iso_wrapper CASE CONTENDER
    local audit=(--audit-db "$TMP/audit/iso-$1.db" --audit-key "$TMP/audit/iso.key")
    case $2 in
        *-no-audit) audit=(--no-audit) ;;
    esac
    local isolation=(--isolation namespaces)
    [[ $2 == airlock-gvisor* ]] && isolation=(--isolation gvisor)
    case $1/$2 in
        isolation-startup/bwrap) printf '%s\n' "${BWRAP_BASE[@]}" ;;
        # gVisor's own start-up, with nothing of Airlock's: no network, its
        # default overlay over the host's root.
        isolation-startup/runsc-do) printf '%s\n' runsc --network=none do ;;
        isolation-startup/airlock-*)
            printf '%s\n' "$AIRLOCK" run "${isolation[@]}" "${audit[@]}" --workspace "$TMP/ws" -- ;;
        # bwrap has no proxy: it shares the host's network (every other
        # namespace unshared) and the client goes straight to nginx.
        isolation-keepalive/bwrap) printf '%s\n' "${BWRAP_BASE[@]}" --share-net -- ;;
        # runsc do makes a network namespace of its own with a veth to the
        # host (and a NAT rule); the sentry's sockets (--network=host) are
        # real sockets there. The host's loopback is not reachable from it,
        # the host's other addresses are: nginx listens on 10.253.0.1 too.
        isolation-keepalive/runsc-do) printf '%s\n' runsc --network=host do ;;
        isolation-keepalive/airlock-*)
            printf '%s\n' "$AIRLOCK" run "${isolation[@]}" "${RUN_POLICY[@]}" --ro "$BIN" "${audit[@]}" --workspace "$TMP/ws" -- ;;
        isolation-workload/bwrap)
            printf '%s\n' "${BWRAP_BASE[@]}" --share-net --bind "$TMP/ws-iso-bwrap" "$TMP/ws-iso-bwrap" --chdir "$TMP/ws-iso-bwrap" -- ;;
        isolation-workload/airlock-*)
            printf '%s\n' "$AIRLOCK" run "${isolation[@]}" "${RUN_POLICY[@]}" "${audit[@]}" --workspace "$TMP/ws-audit" -- ;;
    esac
}

# Where the keep-alive client connects and what it trusts.
iso_route() { # iso_route CONTENDER
    case $1 in
        direct | bwrap) echo "--connect 127.0.0.1:$NGINX_PORT --ca $TMP/pki/ca.pem" ;;
        runsc-do) echo "--connect 10.253.0.1:$NGINX_PORT --ca $TMP/pki/ca.pem" ;;
        # Airlock's DNS and capture; the CA from $SSL_CERT_FILE, set by airlock run.
        airlock-*) echo "--system-dns" ;;
    esac
}

iso_time() { # iso_time CASE CONTENDER RUN WARMUP CMD...: one timed run (after WARMUP untimed ones)
    local c=$1 who=$2 run=$3 warmup=$4
    shift 4
    "$BENCH" time --case "$c" --contender "$who" --runs 1 --warmup "$warmup" --first-run "$run" -- "$@" \
        >> "$SAMPLES" 2>"$TMP/iso-time.stderr" \
        || iso_fail "$c" "$who" "$(tail -n1 "$TMP/iso-time.stderr" | cut -c1-200)"
}

iso_startup() {
    local who run wrap=() c=isolation-startup
    local who_all=(bwrap runsc-do airlock-namespaces-no-audit airlock-namespaces airlock-gvisor-no-audit airlock-gvisor)
    log "isolation: start-up of /bin/true, $START_N runs each, interleaved"
    for run in $(seq 1 "$START_N"); do
        for who in "${who_all[@]}"; do
            iso_skipped "$c" "$who" && continue
            mapfile -t wrap < <(iso_wrapper "$c" "$who")
            # One warm-up each, before its first timed run.
            iso_time "$c" "$who" "$run" "$(( run == 1 ? 1 : 0 ))" "${wrap[@]}" /bin/true
        done
    done
    record "# isolation-startup: airlock-bench time --case isolation-startup --runs 1 --first-run N -- CMD /bin/true, N = 1..$START_N, the contenders interleaved in every N, one warm-up each first; CMD: bwrap = ${BWRAP_BASE[*]} | runsc-do = runsc --network=none do | airlock-namespaces[-no-audit] = airlock run --isolation namespaces [--audit-db \$TMP/audit/iso-isolation-startup.db --audit-key ... | --no-audit] --workspace \$TMP/ws -- | airlock-gvisor[-no-audit] = the same with --isolation gvisor"
}

iso_keepalive() {
    local who run wrap=() route c=isolation-keepalive
    local who_all=(direct bwrap runsc-do airlock-namespaces airlock-gvisor)
    log "isolation: keep-alive from inside the sandbox, $RUNS runs, interleaved"
    for run in $(seq 1 "$RUNS"); do
        for who in "${who_all[@]}"; do
            iso_skipped "$c" "$who" && continue
            mapfile -t wrap < <(iso_wrapper "$c" "$who")
            read -ra route <<< "$(iso_route "$who")"
            log "run $run/$RUNS: $c, $who"
            timeout --kill-after=5 "$LOAD_TIMEOUT_S" "${wrap[@]}" "$BENCH" load --case keepalive --label "$c" \
                --contender "$who" --run "$run" --host bench.test --port "$NGINX_PORT" --resumption off \
                --path /small --concurrency "$CONCURRENCY" --duration "$THROUGHPUT_S" --warmup "$WARMUP_S" \
                "${route[@]}" >> "$SAMPLES" 2>"$TMP/iso-load.stderr" \
                || iso_fail "$c" "$who" "$(grep -v '^\s*$' "$TMP/iso-load.stderr" | tail -n1 | cut -c1-200)"
        done
    done
    record "# isolation-keepalive: CMD airlock-bench load --case keepalive --label isolation-keepalive --contender WHO --run N --host bench.test --port \$NGINX_PORT --resumption off --path /small --concurrency $CONCURRENCY --duration $THROUGHPUT_S --warmup $WARMUP_S ROUTE, the contenders interleaved in every run; direct: no CMD, --connect 127.0.0.1:\$NGINX_PORT --ca \$TMP/pki/ca.pem | bwrap: ${BWRAP_BASE[*]} --share-net --, the same route | runsc-do: runsc --network=host do, --connect 10.253.0.1:\$NGINX_PORT --ca \$TMP/pki/ca.pem | airlock-namespaces: airlock run --isolation namespaces --policy \$TMP/policy.toml --upstream-ca \$TMP/pki/ca.pem --resolve bench.test:127.0.0.1 --ro \$BIN --audit-db \$TMP/audit/iso-isolation-keepalive.db --audit-key ... --workspace \$TMP/ws --, --system-dns | airlock-gvisor: the same with --isolation gvisor"
}

iso_workload() {
    local who run wrap=() work c=isolation-workload
    local who_all=(bwrap airlock-namespaces-no-audit airlock-namespaces airlock-gvisor-no-audit airlock-gvisor)
    mkdir -p "$TMP/ws-iso-bwrap"
    # bwrap has neither Airlock's DNS nor its CA: curl is told nginx's address and CA.
    local bwrap_work=${WORKLOAD/curl -sf/curl -sf --resolve bench.test:$NGINX_PORT:127.0.0.1 --cacert $TMP/pki/ca.pem}
    log "isolation: the auditing-overhead workload, $AUDIT_N runs each, interleaved"
    for run in $(seq 1 "$AUDIT_N"); do
        for who in "${who_all[@]}"; do
            iso_skipped "$c" "$who" && continue
            mapfile -t wrap < <(iso_wrapper "$c" "$who")
            work=$WORKLOAD
            [[ $who == bwrap ]] && work=$bwrap_work
            log "run $run/$AUDIT_N: $c, $who"
            iso_time "$c" "$who" "$run" 0 "${wrap[@]}" sh -c "$work"
        done
    done
    record "# isolation-workload: airlock-bench time --case isolation-workload --runs 1 --warmup 0 --first-run N -- CMD sh -c '$WORKLOAD', N = 1..$AUDIT_N, interleaved; CMD: airlock run --isolation namespaces|gvisor --policy \$TMP/policy.toml --upstream-ca \$TMP/pki/ca.pem --resolve bench.test:127.0.0.1 [--no-audit | --audit-db \$TMP/audit/iso-isolation-workload.db --audit-key ...] --workspace \$TMP/ws-audit -- | bwrap: ${BWRAP_BASE[*]} --share-net --bind \$TMP/ws-iso-bwrap \$TMP/ws-iso-bwrap --chdir \$TMP/ws-iso-bwrap --, its curl with --resolve bench.test:\$NGINX_PORT:127.0.0.1 --cacert \$TMP/pki/ca.pem"
}

# The figures are gVisor's only if gVisor ran them: every audited session
# must be recorded with the isolation its command asked for, and a case
# whose audited gvisor row has figures must hold sessions recorded under it.
iso_check_recorded() {
    local db c
    for c in isolation-startup isolation-keepalive isolation-workload; do
        db="$TMP/audit/iso-$c.db"
        [[ -f $db ]] || continue
        "$AIRLOCK" audit sessions --audit-db "$db" --json > "$TMP/iso-sessions.json" 2>"$TMP/iso-check.stderr" \
            || die "airlock audit sessions failed on the isolation group's record ($c): $(tail -n1 "$TMP/iso-check.stderr")"
        python3 - "$c" "$TMP/iso-sessions.json" "$SAMPLES" <<'PY' || die "the isolation group's record does not match what ran ($c)"
import json, sys
case, sessions_file, samples_file = sys.argv[1:]
gvisor_figures = any(
    s["case"] == case and s["contender"] == "airlock-gvisor" and s.get("metrics")
    for s in map(json.loads, filter(str.strip, open(samples_file)))
)
gvisor = 0
for s in json.load(open(sessions_file)):
    argv = s["command"]
    asked = argv[argv.index("--isolation") + 1] if "--isolation" in argv else "namespaces"
    if s["isolation"] != asked:
        sys.exit(f"bench/run: session {s['id']} asked for --isolation {asked} and was recorded as {s['isolation']}")
    gvisor += asked == "gvisor"
if gvisor_figures and gvisor == 0:
    sys.exit(f"bench/run: {case}: airlock-gvisor has figures but no session was recorded under gvisor")
PY
    done
    record "# the isolation group's record: airlock audit sessions --audit-db \$TMP/audit/iso-CASE.db --json; every session recorded with the isolation its command asked for, and sessions under gvisor wherever airlock-gvisor has figures (else the run fails)"
}

isolation_group() {
    iso_startup
    iso_keepalive
    iso_workload
    iso_check_recorded
}
