#!/bin/sh
# perfbisect-hook: installed by `perfbisect hook install`; `perfbisect hook uninstall` puts back what was here.
#
# After `git pull` (post-merge, fast-forward included) or `git pull --rebase` (post-rewrite) it queues
# ORIG_HEAD..HEAD for `perfbisect check` and starts that check detached, so git waits for nothing.
# It prints the last check's result once, then runs the hook it replaced (same arguments, same stdin).
# It exits 0 whatever happens: a post-merge/post-rewrite hook cannot undo a pull, and this one must
# never make one look failed. Every variable is quoted; nothing from the repository reaches a shell
# command line.
@PERFBISECT_SETTINGS@

orig="$0.perfbisect-orig"
stdin_copy=
if [ "$PB_HOOK" = post-rewrite ]; then
    # post-rewrite reads the rewritten commits on stdin: keep a copy for the hook chained below.
    # mktemp: a fresh private file, never a name someone could have put a symlink at.
    stdin_copy=$(mktemp "${TMPDIR:-/tmp}/perfbisect-rewritten.XXXXXX" 2>/dev/null) || stdin_copy=
    if [ -n "$stdin_copy" ] && ! cat > "$stdin_copy" 2>/dev/null; then
        rm -f "$stdin_copy"
        stdin_copy=
    fi
fi

pb_enqueue() {
    if [ "$PB_HOOK" = post-rewrite ] && [ "$1" != rebase ]; then
        return 0  # `git commit --amend`: not a pull
    fi
    if [ -f "$PB_DIR/unseen" ]; then
        # Printed inert: no escape sequence from a file (a subject, a path) reaches the terminal.
        LC_ALL=C tr -d '\000-\010\013-\037\177' < "$PB_DIR/unseen" 2>/dev/null
        mv -f "$PB_DIR/unseen" "$PB_DIR/seen" 2>/dev/null
    fi
    if ! [ -x "$PB_PYTHON" ]; then
        printf 'perfbisect: this pull is not checked: %s (the perfbisect the hook was installed with) is missing; run `perfbisect hook install` again, or `perfbisect hook uninstall`.\n' "$PB_PYTHON"
        return 0
    fi
    if ! [ -r "$PB_CONFIG" ]; then
        printf 'perfbisect: this pull is not checked: its config %s cannot be read; restore it, or run `perfbisect hook install -c FILE` again.\n' "$PB_CONFIG"
        return 0
    fi
    revs=$(git rev-parse 'ORIG_HEAD^{commit}' 'HEAD^{commit}' 2>/dev/null) || return 0
    set -f
    set -- $revs  # two full shas (hex only)
    old=$1 new=$2
    [ -n "$new" ] && [ "$old" != "$new" ] || return 0
    if ! { mkdir -p "$PB_DIR" && printf '%s %s %s %s\n' "$old" "$new" "$(date +%s)" "$PB_HOOK" >> "$PB_DIR/queue"; } 2>/dev/null; then
        printf 'perfbisect: this pull is not checked: cannot write to %s.\n' "$PB_DIR"
        return 0
    fi
    printf 'perfbisect: checking %.10s..%.10s in the background (`perfbisect status`)\n' "$old" "$new"
    # A worker already draining the queue takes this pull too (it looks at the queue again after
    # releasing its lock, and clears the pid in worker.lock only then): start none.
    pid=
    { read -r pid < "$PB_DIR/worker.lock"; } 2>/dev/null  # no lock file yet: no worker
    case "$pid" in
        '' | *[!0-9]*) ;;
        *) if kill -0 "$pid" 2>/dev/null; then return 0; fi ;;
    esac
    # Detached, every descriptor away from git's: the pull returns now. SIGHUP ignored (nohup);
    # the check puts itself in its own session. If it cannot even start, the next pull says so.
    (
        trap '' HUP
        "$PB_PYTHON" -m perfbisect.hook.hookworker "$PB_CONFIG" "$PB_DIR"
        rc=$?
        if [ "$rc" -ne 0 ] && ! [ -f "$PB_DIR/unseen" ]; then
            # Written aside, then moved in whole: a pull reading `unseen` meanwhile never finds it empty (and
            # moves it away unsaid).
            printf 'perfbisect: the check of the pull %.10s..%.10s did not run (exit %s); see %s\n' \
                "$old" "$new" "$rc" "$PB_DIR/check.log" > "$PB_DIR/unseen.$$" && mv -f "$PB_DIR/unseen.$$" "$PB_DIR/unseen"
        fi
    ) </dev/null >>"$PB_DIR/check.log" 2>&1 &
    return 0
}

pb_enqueue "$@" </dev/null

if [ -x "$orig" ]; then
    if [ -n "$stdin_copy" ]; then
        "$orig" "$@" < "$stdin_copy"
    else
        "$orig" "$@"
    fi
fi
[ -n "$stdin_copy" ] && rm -f "$stdin_copy"
exit 0
