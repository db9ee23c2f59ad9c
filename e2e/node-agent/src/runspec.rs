//! What a container runs, from its image and its spec, by Kubernetes' rules: the argv
//! (`command`/`args` over the image's entrypoint/cmd), the user (`securityContext` over the
//! image's `USER`, names looked up in the image's `/etc/passwd` and `/etc/group`), the working
//! directory and whether the root filesystem is read-only. Pure: the caller reads the files.

use k8s_openapi::api::core::v1::{Container, PodSecurityContext};

use crate::images::ImageConfig;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RunSpecError {
    #[error(
        "no command specified: the image has no entrypoint or cmd and the container no command"
    )]
    NoCommand,
    #[error("image user {user:?}: {reason}")]
    User { user: String, reason: String },
    #[error("container has runAsNonRoot and image will run as root")]
    RunAsRoot,
}

/// How to start the container's process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    pub argv: Vec<String>,
    pub uid: u32,
    pub gid: u32,
    pub working_dir: String,
    pub read_only_root: bool,
}

/// The image's files that name users and groups (empty when the image has none).
#[derive(Debug, Clone, Copy, Default)]
pub struct Accounts<'a> {
    pub passwd: &'a str,
    pub group: &'a str,
}

/// `command` and `args` are the container's, `$(VAR)`-expanded already.
pub fn resolve(
    image: &ImageConfig,
    container: &Container,
    command: Option<Vec<String>>,
    args: Option<Vec<String>>,
    pod_security: Option<&PodSecurityContext>,
    accounts: Accounts<'_>,
) -> Result<RunSpec, RunSpecError> {
    let argv = argv(image, command, args)?;
    let sc = container.security_context.as_ref();
    let (image_uid, image_gid) = image_user(&image.user, accounts)?;
    let uid = sc
        .and_then(|s| s.run_as_user)
        .or_else(|| pod_security.and_then(|s| s.run_as_user))
        .map_or(Ok(image_uid), id)?;
    let gid = sc
        .and_then(|s| s.run_as_group)
        .or_else(|| pod_security.and_then(|s| s.run_as_group))
        .map_or(Ok(image_gid), id)?;
    let non_root = sc
        .and_then(|s| s.run_as_non_root)
        .or_else(|| pod_security.and_then(|s| s.run_as_non_root))
        .unwrap_or(false);
    if non_root && uid == 0 {
        return Err(RunSpecError::RunAsRoot);
    }
    let working_dir = container
        .working_dir
        .clone()
        .filter(|w| !w.is_empty())
        .or_else(|| Some(image.working_dir.clone()).filter(|w| !w.is_empty()))
        .unwrap_or_else(|| "/".to_owned());
    Ok(RunSpec {
        argv,
        uid,
        gid,
        working_dir,
        read_only_root: sc
            .and_then(|s| s.read_only_root_filesystem)
            .unwrap_or(false),
    })
}

fn id(v: i64) -> Result<u32, RunSpecError> {
    u32::try_from(v).map_err(|_| RunSpecError::User {
        user: v.to_string(),
        reason: "not a valid id".into(),
    })
}

/// Kubernetes: `command` replaces the entrypoint (and drops the image's cmd); `args` replace
/// the cmd.
fn argv(
    image: &ImageConfig,
    command: Option<Vec<String>>,
    args: Option<Vec<String>>,
) -> Result<Vec<String>, RunSpecError> {
    let argv = match command.filter(|c| !c.is_empty()) {
        Some(command) => {
            let mut v = command;
            v.extend(args.unwrap_or_default());
            v
        }
        None => {
            let mut v = image.entrypoint.clone();
            v.extend(args.unwrap_or_else(|| image.cmd.clone()));
            v
        }
    };
    if argv.first().is_none_or(String::is_empty) {
        return Err(RunSpecError::NoCommand);
    }
    Ok(argv)
}

/// The image's `USER` as uid and gid: numbers as they are, names from the image's files;
/// without a group, the user's primary group (0 for a uid the image does not list).
fn image_user(user: &str, accounts: Accounts<'_>) -> Result<(u32, u32), RunSpecError> {
    let err = |reason: &str| RunSpecError::User {
        user: user.to_owned(),
        reason: reason.to_owned(),
    };
    if user.is_empty() {
        return Ok((0, 0));
    }
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let passwd = |field: usize, value: &str| {
        accounts.passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 4 && f[field] == value)
                .then(|| (f[2].parse::<u32>().ok(), f[3].parse::<u32>().ok()))
        })
    };
    let (uid, primary) = match u.parse::<u32>() {
        Ok(uid) => (uid, passwd(2, u).and_then(|(_, g)| g).unwrap_or(0)),
        Err(_) => match passwd(0, u) {
            Some((Some(uid), Some(gid))) => (uid, gid),
            _ => return Err(err("no such user in the image's /etc/passwd")),
        },
    };
    let gid = match g {
        None => primary,
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => accounts
                .group
                .lines()
                .find_map(|l| {
                    let f: Vec<&str> = l.split(':').collect();
                    (f.len() >= 3 && f[0] == g)
                        .then(|| f[2].parse::<u32>().ok())
                        .flatten()
                })
                .ok_or_else(|| err("no such group in the image's /etc/group"))?,
        },
    };
    Ok((uid, gid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::SecurityContext;

    const PASSWD: &str = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n";
    const GROUP: &str = "root:x:0:\nnonroot:x:65532:\nstaff:x:50:\n";
    const ACCOUNTS: Accounts<'static> = Accounts {
        passwd: PASSWD,
        group: GROUP,
    };

    fn image() -> ImageConfig {
        ImageConfig {
            entrypoint: vec!["/usr/local/bin/tracehouse-operator".into()],
            cmd: vec!["run".into()],
            user: "65532:65532".into(),
            working_dir: "/home/nonroot".into(),
            ..Default::default()
        }
    }

    fn words(w: &[&str]) -> Option<Vec<String>> {
        Some(w.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn command_and_args_follow_kubernetes_over_entrypoint_and_cmd() {
        let c = Container::default();
        let run = |command, args| resolve(&image(), &c, command, args, None, ACCOUNTS).unwrap();
        assert_eq!(
            run(None, None).argv,
            ["/usr/local/bin/tracehouse-operator", "run"]
        );
        assert_eq!(
            run(None, words(&["crd"])).argv,
            ["/usr/local/bin/tracehouse-operator", "crd"],
            "args replace cmd"
        );
        assert_eq!(
            run(words(&["/bin/x"]), None).argv,
            ["/bin/x"],
            "command drops the image's cmd"
        );
        assert_eq!(
            run(words(&["/bin/x"]), words(&["-v"])).argv,
            ["/bin/x", "-v"]
        );
        let bare = ImageConfig::default();
        assert_eq!(
            resolve(&bare, &c, None, words(&["x"]), None, ACCOUNTS)
                .unwrap()
                .argv,
            ["x"]
        );
        assert_eq!(
            resolve(&bare, &c, None, None, None, ACCOUNTS),
            Err(RunSpecError::NoCommand)
        );
    }

    #[test]
    fn user_comes_from_security_context_then_image() {
        let c = Container::default();
        let r = resolve(&image(), &c, None, None, None, ACCOUNTS).unwrap();
        assert_eq!(
            (r.uid, r.gid, r.working_dir.as_str()),
            (65532, 65532, "/home/nonroot")
        );
        let pod = PodSecurityContext {
            run_as_user: Some(1000),
            run_as_group: Some(1001),
            run_as_non_root: Some(true),
            ..Default::default()
        };
        let r = resolve(&image(), &c, None, None, Some(&pod), ACCOUNTS).unwrap();
        assert_eq!((r.uid, r.gid), (1000, 1001));
        let own = Container {
            security_context: Some(SecurityContext {
                run_as_user: Some(7),
                read_only_root_filesystem: Some(true),
                ..Default::default()
            }),
            working_dir: Some("/data".into()),
            ..Default::default()
        };
        let r = resolve(&image(), &own, None, None, Some(&pod), ACCOUNTS).unwrap();
        assert_eq!(
            (r.uid, r.gid, r.read_only_root, r.working_dir.as_str()),
            (7, 1001, true, "/data"),
            "the container's context wins over the pod's"
        );
    }

    #[test]
    fn image_user_names_are_looked_up_and_root_can_be_refused() {
        let with = |user: &str| ImageConfig {
            user: user.into(),
            ..image()
        };
        let c = Container::default();
        let uid_gid = |user: &str| {
            resolve(&with(user), &c, None, None, None, ACCOUNTS).map(|r| (r.uid, r.gid))
        };
        assert_eq!(uid_gid("nonroot"), Ok((65532, 65532)));
        assert_eq!(uid_gid("nonroot:staff"), Ok((65532, 50)));
        assert_eq!(
            uid_gid("65532"),
            Ok((65532, 65532)),
            "primary group of a listed uid"
        );
        assert_eq!(uid_gid("4242"), Ok((4242, 0)));
        assert_eq!(uid_gid(""), Ok((0, 0)));
        assert!(matches!(
            uid_gid("nobody-here"),
            Err(RunSpecError::User { .. })
        ));
        assert!(matches!(
            uid_gid("nonroot:nogroup"),
            Err(RunSpecError::User { .. })
        ));
        let pod = PodSecurityContext {
            run_as_non_root: Some(true),
            ..Default::default()
        };
        assert_eq!(
            resolve(&with("root"), &c, None, None, Some(&pod), ACCOUNTS),
            Err(RunSpecError::RunAsRoot)
        );
    }
}
