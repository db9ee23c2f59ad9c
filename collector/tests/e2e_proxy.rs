//! A proxy in front of ClickHouse, on the real stack (issue 41, finding 4): nginx at its
//! default `client_max_body_size` (1 MiB) answers 413 without a ClickHouse code to larger
//! inserts. The collector splits them (or, told the limit, never sends them) and every span
//! lands exactly once; before, the 413 was a transport error retried forever and nothing
//! was delivered.
#![cfg(feature = "stack-tests")]

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

/// nginx at its defaults but for where it keeps its files, proxying to the stack's
/// ClickHouse; stopped when dropped.
struct Nginx {
    child: Child,
    url: String,
    dir: PathBuf,
}

impl Nginx {
    fn start() -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("e2e-nginx-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let upstream = var("CLICKHOUSE_URL");
        let d = dir.display();
        // client_max_body_size is left at its default (1m): that is the point.
        let conf = format!(
            "user root;\nworker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{}}\nhttp {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/body;\n\
               proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n\
               scgi_temp_path {d}/scgi;\n  server {{\n    listen 127.0.0.1:{port};\n\
                 location / {{ proxy_pass {upstream}; proxy_http_version 1.1; }}\n  }}\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let mut child = Command::new("nginx")
            .args(["-p", &dir.display().to_string(), "-c"])
            .arg(dir.join("nginx.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx (installed by e2e/setup)");
        let url = format!("http://127.0.0.1:{port}");
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Self { child, url, dir };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("nginx did not listen on {port}");
    }

    /// How many requests nginx answered with `status`.
    fn answered(&self, status: u16) -> usize {
        let log = std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        log.lines()
            .filter(|l| l.contains(&format!("\" {status} ")))
            .count()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: the master stops its worker before it exits (a SIGKILL of the master left
        // the worker running, orphaned, after the test).
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const SPANS: u64 = 100_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_nginx_s_default_body_limit_every_span_lands_once() {
    let proxy = Nginx::start();
    for (name, config) in [
        ("proxy413", None),
        ("proxy_capped", Some("tests/configs/max-body.yaml")),
    ] {
        let w = World::new(name, Attributes::Map);
        w.produce(SPANS, 4, 1).await;
        let mut args = vec!["--clickhouse-url", proxy.url.as_str()];
        if let Some(c) = config {
            args.extend(["--config", c]);
        }
        let c = w.start_collector(&args);
        let rows = w.wait_rows(SPANS, Duration::from_secs(180)).await;
        assert_eq!(rows, SPANS, "{name}: collector log:\n{}", c.log_tail());
        let report = w.verify(SPANS).await;
        assert!(report.is_exact(), "{name}: {report:?}");
        let m = c.metrics().await;
        let split_413 = sum_metric(
            &m,
            "tracehouse_insert_splits_total{reason=\"body_too_large\"}",
        );
        let split_cap = sum_metric(
            &m,
            "tracehouse_insert_splits_total{reason=\"max_body_bytes\"}",
        );
        let skipped = sum_metric(&m, "tracehouse_records_skipped_total");
        assert_eq!(skipped, 0.0, "{name}: nothing skipped");
        match config {
            None => assert!(split_413 > 0.0, "{name}: 413s split the inserts\n{m}"),
            Some(_) => {
                assert_eq!(
                    split_413, 0.0,
                    "{name}: told the limit, no body met the 413"
                );
                assert!(
                    split_cap > 0.0,
                    "{name}: bodies split before they went out\n{m}"
                );
            }
        }
    }
    assert!(proxy.answered(413) > 0, "nginx refused bodies over 1 MiB");
}
