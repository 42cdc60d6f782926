//! meshwrap makes batch and training commands behave inside service-mesh pods.
//!
//! The lifecycle, in order: block every signal meshwrap forwards and read them
//! from a signalfd (before anything else, since PID 1 keeps only the signals
//! it handles or blocks); parse
//! the flags and variables into a [`config::Config`]; read the pod's annotations
//! to drop sidecars the pod does not have and the quit of native ones; with
//! `--guard-dir`, lock the directory shared with `meshwrap guard` and record
//! each phase of the run there; poll the sidecar's ready
//! URLs until each answers 2xx, stopping early on `--timeout` or on TERM, INT,
//! HUP or QUIT; spawn the command in its own process group and, until it ends,
//! forward every signal to it and reap every zombie (meshwrap is often PID 1),
//! or with `--exec` become it, once the signals that came first are handled;
//! then POST each distinct quit URL once (never again once the sidecar may
//! have acted on it), as `--quit-policy` says, on every path that follows a
//! successful parse; and exit with the command's status,
//! 128+n for a signal, 126/127 when it could not be started, 125 for
//! meshwrap's own failures. `meshwrap guard`, in a container of its own,
//! waits for that run to end and quits the sidecar only if meshwrap was
//! killed before it could ([`guard`]).

pub mod alloc;
pub mod cli;
pub mod config;
pub mod duration;
pub mod environ;
pub mod guard;
pub mod install;
pub mod log;
pub mod meshes;
pub mod scuttle;
pub mod sidecar;
pub mod supervise;

use std::ffi::OsString;
use std::future::Future;
use std::time::Instant;

use cli::{Mode, Parsed};
pub use config::EXIT_MESHWRAP_FAILED;
use config::{Config, OnTimeout, QuitPolicy};
use guard::{Hold, Quit};
use sidecar::ready::{Connections, Woke};
use supervise::{Signals, signals};

/// Runs meshwrap with these arguments; returns the process exit code.
pub fn main(args: impl IntoIterator<Item = OsString>) -> u8 {
    let args: Vec<OsString> = args.into_iter().collect();
    // `meshwrap install DIR` copies the binary for an init container; only
    // as the very first argument, so `meshwrap -- install` runs `install`.
    if args.get(1).is_some_and(|a| a == "install") {
        return install::main(&args[2..]);
    }
    // `meshwrap guard [OPTIONS]`, likewise only as the first argument.
    let (mode, args) = match args.split_first() {
        Some((program, rest)) if rest.first().is_some_and(|a| a == "guard") => {
            let args = std::iter::once(program.clone()).chain(rest[1..].iter().cloned());
            (Mode::Guard, args.collect())
        }
        _ => (Mode::Wrap, args),
    };
    // Before anything else: every thread must inherit the mask (see `signals`).
    if let Err(e) = signals::block() {
        return internal_error("cannot block signals", e);
    }
    let mut signals = match Signals::open() {
        Ok(signals) => signals,
        Err(e) => return internal_error("cannot open a signalfd", e),
    };
    match cli::parse(args, mode) {
        Parsed::Run(config) if mode == Mode::Guard => {
            on_runtime(guard(&config, &mut signals)).unwrap_or_else(|e| internal_error("cannot start the runtime", e))
        }
        Parsed::Run(config) => run(&config, &mut signals),
        Parsed::Print(text) => {
            log::stdout(&text);
            0
        }
        Parsed::Invalid(line) => {
            log::stderr_line(&format!("meshwrap: {line}"));
            // The flags are not to be trusted: the default place.
            log::termination_message(
                std::path::Path::new(config::DEFAULT_TERMINATION_LOG),
                &format!("meshwrap: {line}"),
            );
            EXIT_MESHWRAP_FAILED
        }
    }
}

/// Runs `work` on a current-thread runtime made for it. A process makes at
/// most one, and only for what is left once the command has started (or
/// cannot): supervising it, `--quit-delay`, the quit; or the guard. Parsing,
/// the readiness wait and the spawn need none, so a start does not pay for
/// one before the command runs.
fn on_runtime(work: impl Future<Output = u8>) -> std::io::Result<u8> {
    Ok(run_on(runtime()?, work))
}

/// The one current-thread runtime.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    // Blocking threads run only host-name lookups of quit URLs, one at a
    // time per URL (see `sidecar::http`); the cap bounds them even if a
    // resolver hangs.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(4)
        .build()
}

/// Runs `work` to its end on `runtime`, then drops it without waiting.
fn run_on(runtime: tokio::runtime::Runtime, work: impl Future<Output = u8>) -> u8 {
    let code = runtime.block_on(work);
    // Not a plain drop, which waits for every blocking thread: a host-name
    // lookup stuck in a silent resolver would hold meshwrap's exit.
    runtime.shutdown_background();
    code
}

fn internal_error(what: &str, error: std::io::Error) -> u8 {
    log!(Error, what, error = &error.to_string());
    EXIT_MESHWRAP_FAILED
}

/// The lifecycle after parsing: wait, spawn, supervise, quit, exit code.
pub fn run(config: &Config, signals: &mut Signals) -> u8 {
    log::init(config.log_level, config.log_format);
    let plan = sidecar::plan(
        &config.ready_urls,
        &config.quit_urls,
        config.native,
        &config.pod_annotations,
        config.auto,
    );
    if let Err(line) = exec_allowed(config, &plan) {
        return refused(config, &plan, &line, signals);
    }
    let mut hold = match &config.guard_dir {
        Some(dir) => match Hold::take(dir, config.quit_policy) {
            Ok(hold) => Some(hold),
            // A live meshwrap holds the directory and runs its command on
            // this sidecar: a quit now would cut its mesh mid-run, and it
            // quits the sidecar itself when it ends.
            Err(refusal) if refusal.held_by_another => return refused_beside_a_holder(config, &refusal.line),
            Err(refusal) => return refused(config, &plan, &refusal.line, signals),
        },
        None => None,
    };
    let (seen_ready, connections) = match wait(config, &plan, signals) {
        Ok(waited) => waited,
        Err((code, once)) => {
            // The command must not run; the sidecars are quit first, as the
            // policy says, so the pod can still complete.
            return quit_and_exit(config, &plan.quit, (code, once), signals, &mut hold);
        }
    };
    if config.exec {
        return exec(config, signals, &mut hold);
    }
    // Only now: with --exec the setting would outlive meshwrap and make the
    // command a subreaper it never asked to be.
    if let Err(e) = supervise::reaper::become_subreaper() {
        log!(
            Warn,
            "cannot become a child subreaper; orphans of the command go to init",
            error = &e.to_string()
        );
    }
    if let Some(hold) = &mut hold {
        hold.running(seen_ready);
    }
    let started = Instant::now();
    let child = spawn_command(config);
    drop(connections);
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(e) => return without_runtime(config, &plan, (child, started), signals, (seen_ready, &mut hold), e),
    };
    let rest = async {
        let code = match &child {
            Ok(child) => supervise_command(config, child, signals, started).await,
            Err(code) => *code,
        };
        if quitting(config, &plan.quit, code) {
            quit_delay(config, signals).await;
        }
        quit_sidecars(config, &plan.quit, code, (seen_ready, false), &mut hold).await;
        code
    };
    run_on(runtime, rest)
}

/// The runtime could not be made after the spawn (EMFILE or ENFILE for its
/// epoll and eventfd, ENOMEM): the command is not killed. It is supervised
/// without the runtime (signals forwarded, zombies reaped, in a blocking
/// `ppoll` loop), the sidecars are quit as the policy says with blocking
/// requests (after the signalfd is closed, to free a descriptor for them),
/// and the failure goes to the log and the termination log. The command's
/// status stands. `--quit-delay` is not waited for here.
fn without_runtime(
    config: &Config,
    plan: &sidecar::Plan,
    (child, started): (Result<supervise::Child, u8>, Instant),
    signals: &mut Signals,
    (seen_ready, hold): (bool, &mut Option<Hold>),
    error: std::io::Error,
) -> u8 {
    log!(
        Error,
        "cannot start the runtime; supervising the command without it",
        error = &error.to_string()
    );
    let code = match &child {
        Ok(child) => ended(child.supervise_blocking(config.forward_to, signals), started),
        Err(code) => *code,
    };
    // The signalfd's descriptor goes first: at RLIMIT_NOFILE, the
    // termination log and the quit each need one.
    signals.close();
    terminated(
        config,
        &format!("cannot start the runtime ({error}); the command ran without it and exited {code}"),
    );
    quit_blocking(config, &plan.quit, (code, seen_ready), signals, hold);
    code
}

/// The quit without a runtime, as the policy says for `code`: the signalfd
/// is closed first, so a process at its RLIMIT_NOFILE has a descriptor for
/// the request.
fn quit_blocking(
    config: &Config,
    quit: &[sidecar::quit::Target],
    (code, seen_ready): (u8, bool),
    signals: &mut Signals,
    hold: &mut Option<Hold>,
) {
    signals.close();
    if quit_due(config, quit, code, hold) {
        sidecar::quit::quit_all_blocking(quit, config.quit_timeout, config.request_timeout, seen_ready);
        if let Some(hold) = hold {
            hold.done(Some(code), Quit::Sent);
        }
    }
}

/// meshwrap's own failure before the wait (`--exec` refused, a
/// `--guard-dir` it cannot take): the line on stderr and in the termination
/// log, and the quit as the policy says for exit 125, since a sidecar may
/// be running that nothing else will quit. The command never runs.
fn refused(config: &Config, plan: &sidecar::Plan, line: &str, signals: &mut Signals) -> u8 {
    log::stderr_line(&format!("meshwrap: {line}"));
    terminated(config, line);
    quit_and_exit(config, &plan.quit, (EXIT_MESHWRAP_FAILED, false), signals, &mut None)
}

/// The quit of a run whose command never ran, then its exit `code`: on the
/// runtime, or, where none can be made, with blocking requests (the failure
/// logged and in the termination log), so the sidecar is still quit.
fn quit_and_exit(
    config: &Config,
    quit: &[sidecar::quit::Target],
    (code, once): (u8, bool),
    signals: &mut Signals,
    hold: &mut Option<Hold>,
) -> u8 {
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(e) => {
            let line = format!("cannot start the runtime ({e}); quitting the sidecar without it");
            log!(Error, &*line);
            signals.close();
            terminated(config, &line);
            quit_blocking(config, quit, (code, false), signals, hold);
            return code;
        }
    };
    let work = async {
        quit_sidecars(config, quit, code, (false, once), hold).await;
        code
    };
    run_on(runtime, work)
}

/// A `--guard-dir` another live meshwrap holds: the line on stderr and in
/// the termination log, exit 125, and no quit (the holder quits the
/// sidecar when its own command ends).
fn refused_beside_a_holder(config: &Config, line: &str) -> u8 {
    log::stderr_line(&format!("meshwrap: {line}"));
    terminated(config, line);
    log!(
        Info,
        "not quitting the sidecar: the meshwrap that holds --guard-dir uses it, and quits it when its command ends"
    );
    EXIT_MESHWRAP_FAILED
}

/// `--exec` leaves nothing behind to quit the sidecars, so it is refused
/// where a quit would be sent.
fn exec_allowed(config: &Config, plan: &sidecar::Plan) -> Result<(), String> {
    if !config.exec || config.quit_policy == QuitPolicy::Never || plan.quit.is_empty() {
        return Ok(());
    }
    let urls: Vec<&str> = plan.quit.iter().map(|t| t.endpoint.url.as_str()).collect();
    Err(format!(
        "--exec: meshwrap would have to stay to quit {}; with --exec use --quit-policy never, \
         --sidecar none or --native-sidecar true",
        urls.join(", ")
    ))
}

/// The readiness phase: `Ok((seen_ready, connections to close once the
/// command has started))` to go on and run the command, or `Err((exit
/// code, once))` when it must not run: the caller quits the sidecars, once
/// only (`once`) if none answered anything at all.
fn wait(config: &Config, plan: &sidecar::Plan, signals: &mut Signals) -> Result<(bool, Connections), (u8, bool)> {
    if !config.wait {
        log!(Info, "not waiting for the sidecar (--no-wait)");
        return Ok((false, Connections::default()));
    }
    if plan.ready.is_empty() {
        log!(Info, "no ready URL to wait for; starting the command");
        return Ok((false, Connections::default()));
    }
    let board = sidecar::ready::Board::new(plan.ready.len());
    let code = match wait_for_sidecars(config, &plan.ready, signals, &board) {
        Waited::Ready(connections) => return Ok((true, connections)),
        Waited::TimedOut if config.on_timeout == OnTimeout::Run => {
            log!(
                Warn,
                format!(
                    "sidecar not ready in time: {}; running the command anyway (--on-timeout run)",
                    board.pending(&plan.ready)
                )
            );
            return Ok((false, Connections::default()));
        }
        Waited::TimedOut => {
            let line = format!(
                "sidecar not ready in time (--timeout): {}; not running the command",
                board.pending(&plan.ready)
            );
            log!(Error, &*line);
            terminated(config, &line);
            EXIT_MESHWRAP_FAILED
        }
        Waited::Interrupted(sig) => {
            let signal = signals::name(sig);
            log!(
                Info,
                "interrupted while waiting for the sidecar; not running the command",
                signal = &signal
            );
            terminated(
                config,
                &format!("{signal} arrived while waiting for the sidecar; the command never ran"),
            );
            supervise::Status::Signaled(sig).exit_code()
        }
    };
    // A sidecar that answered nothing in the whole wait is most likely not
    // there: one quit attempt, not --quit-timeout's retries (see quit_all).
    Err((code, !board.answered()))
}

/// One line for the pod's status (`--termination-log`), on meshwrap's own
/// failures: Kubernetes shows it as the container's termination message.
fn terminated(config: &Config, line: &str) {
    if let Some(path) = &config.termination_log {
        log::termination_message(path, &format!("meshwrap: {line}"));
    }
}

/// `--exec`: becomes the command, unless a termination signal came first.
/// Returns only if it did not exec.
fn exec(config: &Config, signals: &mut Signals, hold: &mut Option<Hold>) -> u8 {
    // The lock is released at the exec (close-on-exec), so the guard learns
    // now that this run needs no quit.
    if let Some(hold) = hold {
        hold.done(None, Quit::Skipped);
    }
    // Signals read during the wait but not yet handled; those still queued
    // are read at the last moment before the exec (`supervise::exec`).
    let early = signals.take_read();
    for &sig in early.iter().filter(|&&sig| !signals::is_termination(sig)) {
        log!(
            Debug,
            "ignored a signal before the command started",
            signal = &signals::name(sig)
        );
    }
    let error = match early.into_iter().find(|&sig| signals::is_termination(sig)) {
        Some(sig) => supervise::ExecError::Interrupted(sig),
        None => {
            log!(Info, "replacing meshwrap with the command (--exec)");
            supervise::exec(&config.command, signals)
        }
    };
    match error {
        supervise::ExecError::Interrupted(sig) => {
            log!(
                Info,
                "interrupted before the command started; not running it",
                signal = &signals::name(sig)
            );
            supervise::Status::Signaled(sig).exit_code()
        }
        supervise::ExecError::Failed(e) => {
            log!(
                Error,
                "command could not be executed",
                error = &e.error.to_string(),
                code = e.code
            );
            e.code
        }
    }
}

/// `meshwrap guard`: waits for the wrapped meshwrap's run to end, and quits
/// the sidecar only when meshwrap could not (it was killed with its command,
/// or never started). Exits 0 in every case it handles: a non-zero guard
/// would turn a succeeded pod into a failed one.
pub async fn guard(config: &Config, signals: &mut Signals) -> u8 {
    log::init(config.log_level, config.log_format);
    let Some(dir) = &config.guard_dir else {
        return EXIT_MESHWRAP_FAILED;
    };
    let plan = sidecar::plan(
        &config.ready_urls,
        &config.quit_urls,
        config.native,
        &config.pod_annotations,
        config.auto,
    );
    if plan.quit.is_empty() {
        log!(
            Info,
            "guard: no sidecar for meshwrap to quit in this pod; nothing to guard"
        );
        return 0;
    }
    if config.quit_policy == QuitPolicy::Never {
        log!(Info, "guard: --quit-policy never; nothing to guard");
        return 0;
    }
    let mut watch = match guard::watch::Watch::new(dir) {
        Ok(watch) => watch,
        Err(e) => return guard_failed(dir, e),
    };
    match watch
        .until_over(
            config.quit_policy,
            &config.no_quit_on_exit,
            config.start_timeout,
            signals,
        )
        .await
    {
        Ok(guard::watch::Outcome::Nothing) => {}
        Ok(guard::watch::Outcome::Quit { seen_ready }) => {
            if let Some(path) = &config.termination_log {
                let line = "meshwrap guard: meshwrap ended without quitting the sidecar (killed with its command, or never started); the guard quit it";
                log::termination_message(path, line);
            }
            let quit = sidecar::quit::quit_all(
                &plan.quit,
                config.quit_timeout,
                config.request_timeout,
                (seen_ready, false),
                false,
            );
            quit.await;
        }
        Ok(guard::watch::Outcome::Stopped(sig)) => {
            log!(
                Info,
                "guard: stopped (the pod is being deleted)",
                signal = &signals::name(sig)
            );
        }
        Err(e) => return guard_failed(dir, e),
    }
    drop(watch);
    0
}

fn guard_failed(dir: &std::path::Path, error: std::io::Error) -> u8 {
    log!(
        Error,
        "guard: cannot watch --guard-dir",
        dir = &dir.display().to_string(),
        error = &error.to_string()
    );
    EXIT_MESHWRAP_FAILED
}

/// Whether the sidecars are to be quit after a run that ended with `code`
/// (logged either way), recorded for the guard: `quitting`, or `done` with
/// the quit skipped.
fn quit_due(config: &Config, quit: &[sidecar::quit::Target], code: u8, hold: &mut Option<Hold>) -> bool {
    let skipped = if let Some(why) = quit_skipped_because(config, code) {
        log!(Info, format!("not quitting the sidecar: {why}"));
        true
    } else if quit.is_empty() {
        log!(Info, "no quit URL; no sidecar to quit");
        true
    } else {
        false
    };
    if let Some(hold) = hold.as_mut() {
        if skipped {
            hold.done(Some(code), Quit::Skipped);
        } else {
            hold.quitting(code);
        }
    }
    !skipped
}

/// Whether a quit will be sent (the policy allows it and there is a URL).
fn quitting(config: &Config, quit: &[sidecar::quit::Target], code: u8) -> bool {
    !quit.is_empty() && quit_skipped_because(config, code).is_none()
}

fn quit_skipped_because(config: &Config, code: u8) -> Option<&'static str> {
    match config.quit_policy {
        QuitPolicy::Never => Some("--quit-policy never"),
        QuitPolicy::OnSuccess if code != 0 => Some("the command did not succeed and --quit-policy is on-success"),
        _ if config.restarted_on(code) => {
            Some("the kubelet restarts the container on this exit code (--no-quit-on-exit), and it needs the sidecar")
        }
        _ => None,
    }
}

/// `--quit-delay`: waits before the quit; a termination signal ends the wait.
async fn quit_delay(config: &Config, signals: &mut Signals) {
    if config.quit_delay.is_zero() {
        return;
    }
    log!(
        Info,
        format!(
            "waiting {} before quitting the sidecar (--quit-delay)",
            duration::format(config.quit_delay)
        )
    );
    let mut delay = std::pin::pin!(tokio::time::sleep(config.quit_delay));
    loop {
        tokio::select! {
            () = &mut delay => return,
            sig = signals.recv() => match sig {
                sig if signals::is_termination(sig) => {
                    log!(Info, "quitting the sidecar now: a signal ended --quit-delay", signal = &signals::name(sig));
                    return;
                }
                libc::SIGCHLD => supervise::reap_orphans(),
                _ => {}
            },
        }
    }
}

enum Waited {
    Ready(Connections),
    TimedOut,
    Interrupted(libc::c_int),
}

/// Polls the ready URLs, bounded by `--timeout`, until done or interrupted;
/// says what it waits for at growing intervals. No runtime: the wait sleeps
/// in one `ppoll` on the sidecars' sockets and the signalfd (`sidecar::ready`).
fn wait_for_sidecars(
    config: &Config,
    ready: &[sidecar::Endpoint],
    signals: &mut Signals,
    board: &sidecar::ready::Board,
) -> Waited {
    let started = Instant::now();
    let deadline = config.timeout.and_then(|timeout| started.checked_add(timeout));
    let mut wait = sidecar::ready::Wait::new(ready, config.request_timeout, config.poll);
    let mut said = 0;
    loop {
        let progress = started + progress_after(said);
        let until = deadline.map_or(progress, |deadline| deadline.min(progress));
        match wait.run(board, until, signals.poll_fd()) {
            Woke::Ready(polls) => {
                log!(
                    Info,
                    "sidecar ready",
                    after_ms = started.elapsed().as_millis(),
                    polls = polls
                );
                return Waited::Ready(wait.into_connections());
            }
            Woke::Until if deadline.is_some_and(|deadline| Instant::now() >= deadline) => return Waited::TimedOut,
            Woke::Until => {
                progress_line(config, ready, board, started.elapsed(), said == 0);
                said += 1;
            }
            Woke::Readable => {
                while let Some(sig) = signals.try_recv() {
                    match sig {
                        sig if signals::is_termination(sig) => return Waited::Interrupted(sig),
                        libc::SIGCHLD => supervise::reap_orphans(),
                        sig => log!(
                            Debug,
                            "ignored a signal while waiting for the sidecar",
                            signal = &signals::name(sig)
                        ),
                    }
                }
            }
        }
    }
}

/// When the progress line number `said` is due: 5 s, 15 s, 30 s, 60 s, then
/// every minute.
fn progress_after(said: u32) -> std::time::Duration {
    let secs = match said {
        0 => 5,
        1 => 15,
        2 => 30,
        n => 60 * u64::from(n - 2),
    };
    std::time::Duration::from_secs(secs)
}

/// What the wait is for, the last answers and the time so far; the first
/// line says so too when this is plainly not a pod.
fn progress_line(
    config: &Config,
    ready: &[sidecar::Endpoint],
    board: &sidecar::ready::Board,
    after: std::time::Duration,
    first: bool,
) {
    let outside = first
        && !std::path::Path::new("/var/run/secrets/kubernetes.io/serviceaccount/token").exists()
        && !config.pod_annotations.exists();
    let hint = if outside {
        " (no service-account token and no pod annotations: this is no Kubernetes pod; outside a mesh, use --sidecar none)"
    } else {
        ""
    };
    log!(
        Info,
        format!(
            "still waiting for the sidecar after {}: {}{hint}",
            duration::format(std::time::Duration::from_secs(after.as_secs())),
            board.pending(ready)
        )
    );
    // A sidecar that answers, but 404 for a whole minute, is there: the
    // path is what is wrong, and waiting out --timeout will not fix it.
    for url in board.not_found(ready, NOT_FOUND_HINT_AFTER) {
        log!(
            Warn,
            "the ready URL has answered 404 Not Found for over a minute: its path is likely wrong (check --ready-url, or the preset's port and path in docs/meshwrap.md)",
            url = url
        );
    }
}

/// How long a ready URL has answered only 404 when a progress line says
/// its path is likely wrong: from the one-minute line on (the first polls
/// come a moment after the wait starts, so a minute's streak is a little
/// under a minute there).
const NOT_FOUND_HINT_AFTER: std::time::Duration = std::time::Duration::from_secs(50);

/// Starts the command; on failure, meshwrap's exit code for it (126, 127).
fn spawn_command(config: &Config) -> Result<supervise::Child, u8> {
    let program = config.command.first().map(|p| p.to_string_lossy()).unwrap_or_default();
    match supervise::spawn(&config.command) {
        Ok(child) => {
            log!(Info, "command started", pid = child.pid, command = &*program);
            Ok(child)
        }
        Err(e) => {
            let why = match (e.code, e.cause()) {
                (127, _) => "command not found".to_string(),
                (125, Some(cause)) => format!("could not make a process for the command: {cause}"),
                (125, None) => "could not make a process for the command".to_string(),
                _ => "command could not be executed".to_string(),
            };
            log!(
                Error,
                &*why,
                command = &*program,
                error = &e.error.to_string(),
                code = e.code
            );
            if e.code == EXIT_MESHWRAP_FAILED {
                terminated(config, &why);
            }
            Err(e.code)
        }
    }
}

/// Supervises the started command; returns meshwrap's exit code for it.
async fn supervise_command(config: &Config, child: &supervise::Child, signals: &mut Signals, started: Instant) -> u8 {
    ended(child.supervise(config.forward_to, signals).await, started)
}

/// Logs how the command ended; meshwrap's exit code for it.
fn ended(status: supervise::Status, started: Instant) -> u8 {
    log!(
        Info,
        "command ended",
        status = &status.describe(),
        code = status.exit_code(),
        ms = started.elapsed().as_millis()
    );
    status.exit_code()
}

/// Quits the sidecars if the policy says so, after a run that ended with
/// `code`, and records the outcome for the guard; never changes the exit code.
async fn quit_sidecars(
    config: &Config,
    quit: &[sidecar::quit::Target],
    code: u8,
    (seen_ready, once): (bool, bool),
    hold: &mut Option<Hold>,
) {
    if !quit_due(config, quit, code, hold) {
        return;
    }
    sidecar::quit::quit_all(
        quit,
        config.quit_timeout,
        config.request_timeout,
        (seen_ready, once),
        config.verify_quit,
    )
    .await;
    if let Some(hold) = hold {
        hold.done(Some(code), Quit::Sent);
    }
}
