#!/bin/sh
# Run every fuzz target in turn for SECONDS (default 180), one at a time, with
# its seeds (fuzz/seeds/TARGET, if any) and its growing corpus
# (fuzz/corpus/TARGET). Logs go to fuzz/logs/TARGET.log; the last line of each
# log has the final execs, cov: and ft: figures. Needs cargo-fuzz; on a stable
# toolchain RUSTC_BOOTSTRAP=1 lets it pass -Zsanitizer and friends.
set -u
cd "$(dirname "$0")"
SECONDS_PER_TARGET=${1:-180}
shift 2>/dev/null || true
TARGETS=${*:-"client_hello policy_parse dns_answer host_parse path_evaluate body_evaluate authority scrub_stream suggest_draft"}
mkdir -p logs corpus
export RUSTC_BOOTSTRAP=1
for t in $TARGETS; do
    mkdir -p "corpus/$t"
    seeds=""
    [ -d "seeds/$t" ] && seeds="seeds/$t"
    max_len=4096
    [ "$t" = client_hello ] && max_len=20000
    nice -n 10 cargo fuzz run -O "$t" "corpus/$t" $seeds -- \
        -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
        -max_len="$max_len" -print_final_stats=1 >"logs/$t.log" 2>&1
    echo "$t: exit $? $(grep -E '^#[0-9]+' "logs/$t.log" | tail -n 1)"
done
