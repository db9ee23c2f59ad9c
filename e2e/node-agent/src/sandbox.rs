//! The container sandbox: how a container's process is started from its image.
//!
//! The node agent runs
//! `/usr/bin/unshare --pid --mount --uts --fork --kill-child <agent> pod-init SPEC`.
//! `unshare` makes new PID, mount and UTS namespaces and forks; the child (the agent binary
//! again, PID 1 of the new PID namespace) runs [`init`], which builds the container's root
//! and `exec`s the container's program in it, so the program is PID 1 of its namespace:
//!
//! 1. the image's unpacked root filesystem as the lower layer of an overlay whose upper layer
//!    is the container's own directory (emptied before each start, like a new container's
//!    writable layer), mounted at `<layer>/merged`;
//! 2. the pod's volumes bound at their mount paths (read-only ones remounted read-only), the
//!    pod's `/etc/hosts`, `/etc/hostname`, `/etc/resolv.conf`, a `/dev` with the usual
//!    devices, and a fresh `/proc` of the new PID namespace;
//! 3. the root remounted read-only when `readOnlyRootFilesystem` is set;
//! 4. `sethostname(pod name)`, `chroot`, `chdir(workingDir)`, the user's gid and uid, `exec`.
//!
//! There is no network namespace: a pod listens on its own loopback IP (see `ips`). A step that
//! fails ends the container with exit code 127 and says which step on its stderr (the pod log).
//! Everything here is mount/exec plumbing; what to run is decided by `runspec` beforehand.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};
use nix::unistd::{Gid, Uid, chdir, chroot, execvp, setgid, setgroups, sethostname, setuid};
use serde::{Deserialize, Serialize};

/// util-linux's `unshare` (Debian's path). Absolute, because the pid records name the leader's
/// executable and leftovers are only killed while `/proc/<pid>/exe` still matches it.
const UNSHARE: &str = "/usr/bin/unshare";

/// The argument that switches the agent binary into [`init`].
pub const INIT_ARG: &str = "pod-init";

/// Devices bound from the host into the container's `/dev`, as a container runtime provides.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// A bind mount into the container's root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bind {
    pub host: PathBuf,
    /// Absolute path inside the container.
    pub path: String,
    pub read_only: bool,
}

/// Everything [`init`] needs, handed over as one JSON argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitSpec {
    pub rootfs: PathBuf,
    /// The container's writable layer: `upper/`, `work/` and the mount point `merged/`.
    pub layer: PathBuf,
    pub binds: Vec<Bind>,
    pub read_only_root: bool,
    pub hostname: String,
    pub uid: u32,
    pub gid: u32,
    pub working_dir: String,
    pub argv: Vec<String>,
}

/// The program and arguments that start a container described by `spec`; `agent_exe` is the
/// node agent's own executable (`/proc/<pid>/exe`, which survives a rebuild of the binary).
pub fn command(agent_exe: &Path, spec: &InitSpec) -> (PathBuf, Vec<String>) {
    let json = serde_json::to_string(spec).unwrap_or_default();
    let args = [
        "--pid",
        "--mount",
        "--uts",
        "--fork",
        "--kill-child",
        "--propagation",
        "private",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain([agent_exe.display().to_string(), INIT_ARG.to_owned(), json])
    .collect();
    (PathBuf::from(UNSHARE), args)
}

/// Empties the container's writable layer before a start.
pub fn reset_layer(layer: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(layer) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    for d in ["upper", "work", "merged"] {
        std::fs::create_dir_all(layer.join(d))?;
    }
    Ok(())
}

/// Runs in the new namespaces: builds the root and execs the program. Never returns on
/// success; on failure prints the failed step and exits 127.
pub fn init(json: &str) -> ! {
    let err = match serde_json::from_str::<InitSpec>(json)
        .map_err(|e| format!("reading the container spec: {e}"))
        .and_then(|spec| setup_and_exec(&spec))
    {
        Ok(never) => match never {},
        Err(e) => e,
    };
    eprintln!("tracehouse-node-agent pod-init: {err}");
    std::process::exit(127);
}

enum Never {}

fn step<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

fn setup_and_exec(spec: &InitSpec) -> Result<Never, String> {
    let none: Option<&str> = None;
    let root = spec.layer.join("merged");
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        spec.rootfs.display(),
        spec.layer.join("upper").display(),
        spec.layer.join("work").display()
    );
    step(
        "mounting the root overlay",
        mount(
            Some("overlay"),
            &root,
            Some("overlay"),
            MsFlags::empty(),
            Some(options.as_str()),
        ),
    )?;
    for b in &spec.binds {
        let target = inside(&root, &b.path);
        step(
            &format!("creating mount point {}", b.path),
            mount_point(&b.host, &target),
        )?;
        step(
            &format!("binding {} at {}", b.host.display(), b.path),
            mount(
                Some(&b.host),
                &target,
                none,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                none,
            ),
        )?;
        if b.read_only {
            step(
                &format!("making {} read-only", b.path),
                mount(
                    none,
                    &target,
                    none,
                    MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
                    none,
                ),
            )?;
        }
    }
    let dev = root.join("dev");
    step("creating /dev", std::fs::create_dir_all(&dev))?;
    step(
        "mounting /dev",
        mount(
            Some("tmpfs"),
            &dev,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
            Some("mode=755,size=65536k"),
        ),
    )?;
    for d in DEVICES {
        let host = Path::new("/dev").join(d);
        if host.exists() {
            let target = dev.join(d);
            step(&format!("creating /dev/{d}"), std::fs::write(&target, b""))?;
            step(
                &format!("binding /dev/{d}"),
                mount(Some(&host), &target, none, MsFlags::MS_BIND, none),
            )?;
        }
    }
    step(
        "creating /dev/shm",
        std::fs::create_dir_all(dev.join("shm")),
    )?;
    let proc_dir = root.join("proc");
    step("creating /proc", std::fs::create_dir_all(&proc_dir))?;
    step(
        "mounting /proc",
        mount(
            Some("proc"),
            &proc_dir,
            Some("proc"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            none,
        ),
    )?;
    if spec.read_only_root {
        step(
            "making the root read-only",
            mount(
                none,
                &root,
                none,
                MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
                none,
            ),
        )?;
    }
    step("setting the hostname", sethostname(&spec.hostname))?;
    step("chroot", chroot(&root))?;
    step(
        &format!("changing to the working directory {}", spec.working_dir),
        chdir(spec.working_dir.as_str()),
    )?;
    let gid = Gid::from_raw(spec.gid);
    step("setgroups", setgroups(&[gid]))?;
    step("setgid", setgid(gid))?;
    step("setuid", setuid(Uid::from_raw(spec.uid)))?;
    let argv: Vec<CString> = spec
        .argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("argument with a NUL byte: {e}"))?;
    let program = argv.first().ok_or("no program to run")?;
    match execvp(program, &argv) {
        Ok(never) => match never {},
        Err(e) => Err(format!("exec {}: {e}", spec.argv[0])),
    }
}

/// `path` (absolute, inside the container) under the container's root on the host.
fn inside(root: &Path, path: &str) -> PathBuf {
    let rel = path.trim_start_matches('/');
    if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    }
}

/// A mount point of the same kind as `source`: a directory, or an empty file.
fn mount_point(source: &Path, target: &Path) -> std::io::Result<()> {
    if source.is_dir() {
        return std::fs::create_dir_all(target);
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    if !target.exists() {
        std::fs::write(target, b"")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> InitSpec {
        InitSpec {
            rootfs: "/images/abc/rootfs".into(),
            layer: "/pods/uid/containers/c".into(),
            binds: vec![Bind {
                host: "/pods/uid/volumes/config".into(),
                path: "/etc/tracehouse".into(),
                read_only: true,
            }],
            read_only_root: true,
            hostname: "pod-1".into(),
            uid: 65532,
            gid: 65532,
            working_dir: "/".into(),
            argv: vec!["/usr/local/bin/tracehouse-collector".into(), "run".into()],
        }
    }

    #[test]
    fn command_runs_unshare_with_the_agent_as_init_and_the_spec_as_json() {
        let (program, args) = command(Path::new("/proc/42/exe"), &spec());
        assert_eq!(program, Path::new("/usr/bin/unshare"));
        let init_at = args.iter().position(|a| a == "/proc/42/exe").unwrap();
        for flag in ["--pid", "--mount", "--uts", "--fork", "--kill-child"] {
            assert!(
                args[..init_at].iter().any(|a| a == flag),
                "{flag}: {args:?}"
            );
        }
        assert_eq!(args[init_at + 1], INIT_ARG);
        let back: InitSpec = serde_json::from_str(&args[init_at + 2]).unwrap();
        assert_eq!(back, spec());
        assert_eq!(args.len(), init_at + 3);
    }

    #[test]
    fn container_paths_land_under_the_root() {
        let root = Path::new("/r/merged");
        assert_eq!(inside(root, "/etc/x"), Path::new("/r/merged/etc/x"));
        assert_eq!(inside(root, "/"), root);
    }

    #[test]
    fn reset_layer_empties_the_writable_layer() {
        let dir = tempfile::tempdir().unwrap();
        let layer = dir.path().join("c");
        reset_layer(&layer).unwrap();
        std::fs::write(layer.join("upper/left-over"), b"x").unwrap();
        reset_layer(&layer).unwrap();
        assert_eq!(std::fs::read_dir(layer.join("upper")).unwrap().count(), 0);
        assert!(layer.join("work").is_dir() && layer.join("merged").is_dir());
    }

    #[test]
    fn mount_points_match_the_source_kind() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        mount_point(&file, &dir.path().join("root/etc/hosts")).unwrap();
        assert!(dir.path().join("root/etc/hosts").is_file());
        mount_point(dir.path(), &dir.path().join("root/etc/cfg")).unwrap();
        assert!(dir.path().join("root/etc/cfg").is_dir());
    }
}
