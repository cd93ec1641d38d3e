# check DESCRIPTION COMPARE_ARGS...: runs llama-tp-compare, prints its JSON
# verdict and counts it in $cases and $failures. Sourced by the accuracy
# scripts, which set $compare and $work. With $expect_exact set, the run must
# have used split-invariant sums (true) or not (false). One thread unless
# $threads says: CTest runs two scripts at once on two cores, and more
# threads than cores wait on each other (twice as long in all).
failures=0 cases=0
check() {
    local what=$1; shift
    cases=$((cases + 1))
    local out
    out=$("$compare" "$@" --json -t "${threads:-1}" 2>"$work/stderr.log")
    local rc=$?
    echo "$what: $out"
    if [[ -n ${expect_exact:-} && $out != *"\"split_invariant\": $expect_exact"* ]]; then
        echo "FAILED: $what: expected split_invariant $expect_exact" >&2
        rc=1
    fi
    # Split-invariant sums against one rank: the contract's clause is exact
    # only where the slices sit on the 16-row tiles, so the result is checked
    # here too; a split that fell off them would pass the float-sum bounds.
    if [[ $* == *--split-invariant* && $* == *"--reference tp1"* && $out != *'"max_abs_prob_diff": 0.000e+00,'* ]]; then
        echo "FAILED: $what: split-invariant sums gave other probabilities than one rank" >&2
        rc=1
    fi
    if ((rc != 0)); then
        failures=$((failures + 1))
        echo "FAILED: $what" >&2
        tail -5 "$work/stderr.log" >&2
    fi
}
