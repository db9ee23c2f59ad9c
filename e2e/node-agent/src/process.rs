//! One container run = one local process in its own process group.
//!
//! The group lets a stop reach everything the container started (a shell and its children,
//! say). Each running group is recorded in `<pid dir>/<pod uid>_<container>.pid` as
//! `PGID EXE`, so `e2e/lib/k8s.sh` can kill leftovers if the node agent itself dies without
//! cleaning up (SIGKILL, crash). On drop, a still-running group is killed.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// What to run.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// stdout and stderr are appended here.
    pub log: PathBuf,
    pub pid_file: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("opening log {path}: {source}")]
    Log { path: PathBuf, source: io::Error },
    #[error("starting {program}: {source}")]
    Spawn { program: PathBuf, source: io::Error },
    #[error("waiting for pid {pid}: {source}")]
    Wait { pid: i32, source: io::Error },
}

/// A running container process.
#[derive(Debug)]
pub struct Running {
    child: Child,
    pid: i32,
    pid_file: PathBuf,
    exited: bool,
}

impl Running {
    pub fn spawn(spec: &ProcessSpec, banner: &str) -> Result<Self, ProcessError> {
        let log_err = |source| ProcessError::Log {
            path: spec.log.clone(),
            source,
        };
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log)
            .map_err(log_err)?;
        writeln!(log, "==== {banner} ====").map_err(log_err)?;
        let stderr: File = log.try_clone().map_err(log_err)?;
        let child = Command::new(&spec.program)
            .args(&spec.args)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&spec.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr))
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| ProcessError::Spawn {
                program: spec.program.clone(),
                source,
            })?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| ProcessError::Spawn {
                program: spec.program.clone(),
                source: io::Error::other("no pid"),
            })?;
        let exe = std::fs::canonicalize(&spec.program).unwrap_or_else(|_| spec.program.clone());
        if let Err(e) = std::fs::write(&spec.pid_file, format!("{pid} {}\n", exe.display())) {
            tracing::warn!(file = %spec.pid_file.display(), error = %e, "cannot record pid file");
        }
        Ok(Self {
            child,
            pid,
            pid_file: spec.pid_file.clone(),
            exited: false,
        })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The pid of the process's first child, as the host sees it: with the sandbox, the
    /// container's own program (PID 1 of its namespace) under `unshare`. Waits up to `within`
    /// for the fork; `None` when there is none (the process exited, or runs no child).
    pub async fn first_child(&self, within: Duration) -> Option<i32> {
        let path = format!("/proc/{0}/task/{0}/children", self.pid);
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let children = std::fs::read_to_string(&path).unwrap_or_default();
            if let Some(pid) = children
                .split_whitespace()
                .next()
                .and_then(|p| p.parse().ok())
            {
                return Some(pid);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits for the process to exit; cancel-safe.
    pub async fn wait(&mut self) -> Result<ExitStatus, ProcessError> {
        let status = self
            .child
            .wait()
            .await
            .map_err(|source| ProcessError::Wait {
                pid: self.pid,
                source,
            })?;
        self.reap();
        Ok(status)
    }

    /// SIGTERM to the group, up to `grace` for it to exit, then SIGKILL.
    pub async fn stop(&mut self, grace: Duration) -> Result<ExitStatus, ProcessError> {
        self.signal(Signal::SIGTERM);
        if let Ok(status) = tokio::time::timeout(grace, self.child.wait()).await {
            let status = status.map_err(|source| ProcessError::Wait {
                pid: self.pid,
                source,
            })?;
            self.reap();
            return Ok(status);
        }
        tracing::info!(
            pid = self.pid,
            ?grace,
            "process did not exit within its grace period; killing"
        );
        self.signal(Signal::SIGKILL);
        self.wait().await
    }

    fn signal(&self, signal: Signal) {
        // ESRCH: the group is gone already, which is what we want.
        let _ = killpg(Pid::from_raw(self.pid), signal);
    }

    /// The leader exited: take down whatever is left of its group and forget the pid file.
    fn reap(&mut self) {
        self.exited = true;
        self.signal(Signal::SIGKILL);
        let _ = std::fs::remove_file(&self.pid_file);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.exited {
            self.signal(Signal::SIGKILL);
            let _ = std::fs::remove_file(&self.pid_file);
        }
    }
}

/// Kills the process groups recorded in `pids_dir` by an earlier agent that did not stop its
/// containers (it was SIGKILLed, say); their pods get fresh processes. A group is only killed
/// while its leader still runs the recorded binary (or that binary, since replaced by a
/// rebuild), so a recycled pid is left alone. Returns the killed group ids.
pub fn kill_leftovers(pids_dir: &Path) -> Vec<i32> {
    let mut killed = Vec::new();
    let Ok(entries) = std::fs::read_dir(pids_dir) else {
        return killed;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "pid") {
            continue;
        }
        let record = std::fs::read_to_string(&path).unwrap_or_default();
        if let Some((pgid, exe)) = record.trim().split_once(' ')
            && let Ok(pgid) = pgid.parse::<i32>()
        {
            let running = std::fs::read_link(format!("/proc/{pgid}/exe")).unwrap_or_default();
            let running = running.to_string_lossy();
            if running == exe || running == format!("{exe} (deleted)") {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
                killed.push(pgid);
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    killed
}

/// Kubernetes' exit code for a status: the code, or 128 + signal for a killed process.
pub fn exit_code(status: ExitStatus) -> (i32, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => (code, None),
        (None, Some(sig)) => (128 + sig, Some(sig)),
        (None, None) => (-1, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dir: &std::path::Path, script: &str) -> ProcessSpec {
        ProcessSpec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            env: vec![("GREETING".into(), "hi".into())],
            cwd: dir.to_path_buf(),
            log: dir.join("log"),
            pid_file: dir.join("c.pid"),
        }
    }

    #[tokio::test]
    async fn runs_with_only_the_given_env_and_records_its_pid() {
        let dir = tempfile::tempdir().unwrap();
        let mut p =
            Running::spawn(&spec(dir.path(), "echo $GREETING $HOME; exit 3"), "start 1").unwrap();
        assert!(dir.path().join("c.pid").exists());
        let (code, signal) = exit_code(p.wait().await.unwrap());
        assert_eq!((code, signal), (3, None));
        assert!(
            !dir.path().join("c.pid").exists(),
            "pid file removed on exit"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("log")).unwrap(),
            "==== start 1 ====\nhi\n"
        );
    }

    #[tokio::test]
    async fn first_child_is_the_forked_process() {
        let dir = tempfile::tempdir().unwrap();
        let mut p =
            Running::spawn(&spec(dir.path(), "sleep 300 & echo $! > child; wait"), "s").unwrap();
        let child = p
            .first_child(Duration::from_secs(5))
            .await
            .expect("a child");
        // The shell creates the file before it writes the pid into it: wait for the number.
        let read_child = || {
            std::fs::read_to_string(dir.path().join("child"))
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
        };
        let mut tries = 0;
        while read_child().is_none() && tries < 250 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            tries += 1;
        }
        let recorded = read_child().expect("the shell wrote its child's pid");
        assert_eq!(child, recorded);
        p.stop(Duration::from_millis(100)).await.unwrap();
    }

    #[tokio::test]
    async fn stop_escalates_to_sigkill_and_reaches_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        // The shell ignores TERM; its background child would survive a signal to the leader only.
        let script = "trap '' TERM; sleep 300 & echo $! > child; wait";
        let mut p = Running::spawn(&spec(dir.path(), script), "start").unwrap();
        let child_file = dir.path().join("child");
        // The shell creates the file before it writes the pid into it: wait for the number.
        let read_child = || {
            std::fs::read_to_string(&child_file)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
        };
        let mut tries = 0;
        while read_child().is_none() && tries < 250 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            tries += 1;
        }
        let child: i32 = read_child().expect("the shell wrote its child's pid");
        let (code, signal) = exit_code(p.stop(Duration::from_millis(300)).await.unwrap());
        assert_eq!((code, signal), (137, Some(9)));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let alive = std::fs::read_to_string(format!("/proc/{child}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false);
        assert!(!alive, "group member {child} was killed too");
    }

    #[tokio::test]
    async fn leftovers_of_a_previous_agent_are_killed_but_not_strangers() {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        std::fs::create_dir(&pids).unwrap();
        // Two commands, so the shell stays the group leader instead of exec-ing sleep.
        let mut s = spec(dir.path(), "sleep 300; true");
        s.pid_file = pids.join("uid_c.pid");
        let mut p = Running::spawn(&s, "start").unwrap();
        // Recorded as another binary: must not be touched.
        std::fs::write(
            pids.join("other.pid"),
            format!("{} /usr/bin/not-it\n", std::process::id()),
        )
        .unwrap();
        let killed = kill_leftovers(&pids);
        assert_eq!(killed, vec![p.pid()]);
        let (code, signal) = exit_code(p.wait().await.unwrap());
        assert_eq!((code, signal), (137, Some(9)));
        assert_eq!(
            std::fs::read_dir(&pids).unwrap().count(),
            0,
            "records are removed"
        );
    }
}
