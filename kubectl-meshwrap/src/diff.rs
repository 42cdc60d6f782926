//! A unified diff of two texts, line by line, for `inject --diff` (what
//! `--in-place` would change, in the form `git apply` and `patch -p1` take).
//!
//! Myers' O((N+M)·D) shortest edit script: inject's changes are a few
//! additions (and the odd `~` replaced) to files of a few thousand lines,
//! so D, the lines changed, stays small and the cost near linear. Lines
//! keep their line ends, so a last line without one is told apart
//! (`\ No newline at end of file`, as diff(1) writes it).

/// One line of the edit script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Keep,
    Del,
    Ins,
}

/// Lines that differ, with this many lines of context around each change.
const CONTEXT: usize = 3;

/// `old` to `new` as a unified diff with `--- a/PATH` and `+++ b/PATH`;
/// empty when they are the same.
pub fn unified(path: &str, old: &str, new: &str) -> String {
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    let script = script(&a, &b);
    if script.iter().all(|op| *op == Op::Keep) {
        return String::new();
    }
    let mut out = format!("--- a/{path}\n+++ b/{path}\n");
    for (start, end) in hunks(&script) {
        hunk(&mut out, &script[start..end], (&a, &b), position(&script, start));
    }
    out
}

/// The most lines changed the search goes to: its frontiers take D² words
/// (32 MB here). Past it, the diff replaces the whole file, still correct.
const MAX_CHANGED: isize = 2000;

/// The shortest edit script from `a` to `b` (Myers 1986, forward greedy,
/// with each round's frontier kept to trace the path back); beyond
/// [`MAX_CHANGED`] lines, every old line out and every new one in.
fn script(a: &[&str], b: &[&str]) -> Vec<Op> {
    let (n, m) = (a.len() as isize, b.len() as isize);
    let offset = n + m + 1;
    let mut v = vec![0isize; 2 * offset as usize + 1];
    let mut trace = Vec::new();
    'rounds: for d in 0..=(n + m) {
        if d > MAX_CHANGED {
            let mut ops = vec![Op::Del; a.len()];
            ops.extend(std::iter::repeat_n(Op::Ins, b.len()));
            return ops;
        }
        // Round d (and its trace back) reads only diagonals -d-1..=d+1 of
        // the last frontier.
        let lo = (offset - d - 1).max(0) as usize;
        trace.push((lo, v[lo..=((offset + d + 1) as usize).min(v.len() - 1)].to_vec()));
        for k in (-d..=d).step_by(2) {
            let i = (k + offset) as usize;
            let mut x = if k == -d || (k != d && v[i - 1] < v[i + 1]) {
                v[i + 1]
            } else {
                v[i - 1] + 1
            };
            let mut y = x - k;
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            v[i] = x;
            if x >= n && y >= m {
                break 'rounds;
            }
        }
    }
    back(&trace, (n, m), offset)
}

/// The script, traced back from the end through each round's frontier
/// (each kept from its index `lo` on).
fn back(trace: &[(usize, Vec<isize>)], (mut x, mut y): (isize, isize), offset: isize) -> Vec<Op> {
    let mut ops = Vec::new();
    for (d, (lo, v)) in trace.iter().enumerate().rev() {
        let d = d as isize;
        let k = x - y;
        let at = |k: isize| v[(k + offset) as usize - lo];
        let down = k == -d || (k != d && at(k - 1) < at(k + 1));
        let prev_k = if down { k + 1 } else { k - 1 };
        let (px, py) = (at(prev_k), at(prev_k) - prev_k);
        while x > px && y > py {
            ops.push(Op::Keep);
            x -= 1;
            y -= 1;
        }
        if d > 0 {
            ops.push(if down { Op::Ins } else { Op::Del });
        }
        (x, y) = (px, py);
    }
    ops.reverse();
    ops
}

/// The script's hunks, as ranges of it: each change with its context,
/// changes closer than twice the context joined.
fn hunks(script: &[Op]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (i, _) in script.iter().enumerate().filter(|(_, op)| **op != Op::Keep) {
        let (start, end) = (i.saturating_sub(CONTEXT), (i + 1 + CONTEXT).min(script.len()));
        match out.last_mut() {
            Some(last) if start <= last.1 => last.1 = end,
            _ => out.push((start, end)),
        }
    }
    out
}

/// The lines of `a` and `b` before `at` in the script: where a hunk starts.
fn position(script: &[Op], at: usize) -> (usize, usize) {
    script[..at].iter().fold((0, 0), |(x, y), op| match op {
        Op::Keep => (x + 1, y + 1),
        Op::Del => (x + 1, y),
        Op::Ins => (x, y + 1),
    })
}

/// One hunk: its `@@` header and lines.
fn hunk(out: &mut String, ops: &[Op], (a, b): (&[&str], &[&str]), (mut x, mut y): (usize, usize)) {
    let count = |keep: Op| ops.iter().filter(|op| **op == Op::Keep || **op == keep).count();
    let (old_len, new_len) = (count(Op::Del), count(Op::Ins));
    let from = |start: usize, len: usize| if len == 0 { start } else { start + 1 };
    out.push_str(&format!(
        "@@ -{},{old_len} +{},{new_len} @@\n",
        from(x, old_len),
        from(y, new_len)
    ));
    for op in ops {
        let (mark, line) = match op {
            Op::Keep => {
                x += 1;
                y += 1;
                (' ', a[x - 1])
            }
            Op::Del => {
                x += 1;
                ('-', a[x - 1])
            }
            Op::Ins => {
                y += 1;
                ('+', b[y - 1])
            }
        };
        out.push(mark);
        out.push_str(line);
        if !line.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_text_is_no_diff() {
        assert_eq!(unified("f", "a\nb\n", "a\nb\n"), "");
        assert_eq!(unified("f", "", ""), "");
    }

    #[test]
    fn an_insertion_is_one_hunk_with_its_context() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n";
        let new = "1\n2\n3\n4\nx\ny\n5\n6\n7\n8\n";
        assert_eq!(
            unified("job.yaml", old, new),
            "--- a/job.yaml\n+++ b/job.yaml\n@@ -2,6 +2,8 @@\n 2\n 3\n 4\n+x\n+y\n 5\n 6\n 7\n"
        );
    }

    #[test]
    fn a_replaced_line_and_far_apart_changes_and_a_last_line_without_newline() {
        let old = "a: ~\nb\nc\nd\ne\nf\ng\nh\ni\nj";
        let new = "a: {}\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\n";
        let diff = unified("f", old, new);
        assert!(diff.contains("@@ -1,4 +1,4 @@\n-a: ~\n+a: {}\n b\n c\n d\n"), "{diff}");
        assert!(
            diff.contains("@@ -7,4 +7,5 @@\n g\n h\n i\n-j\n\\ No newline at end of file\n+j\n+k\n"),
            "{diff}"
        );
    }

    #[test]
    fn a_change_past_the_search_bound_replaces_the_whole_file() {
        let old: String = (0..3000).map(|i| format!("{i}\n")).collect();
        let new: String = (0..3000).map(|i| format!("x{i}\n")).collect();
        let diff = unified("f", &old, &new);
        assert!(
            diff.starts_with("--- a/f\n+++ b/f\n@@ -1,3000 +1,3000 @@\n-0\n"),
            "{}",
            &diff[..60]
        );
        assert_eq!(
            diff.lines()
                .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
                .count(),
            3000
        );
    }

    #[test]
    fn from_nothing_and_to_nothing() {
        assert_eq!(unified("f", "", "a\n"), "--- a/f\n+++ b/f\n@@ -0,0 +1,1 @@\n+a\n");
        assert_eq!(unified("f", "a\n", ""), "--- a/f\n+++ b/f\n@@ -1,1 +0,0 @@\n-a\n");
    }
}
