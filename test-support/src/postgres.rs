//! A real PostgreSQL server of the test's own: `initdb` into a fresh
//! directory as the `postgres` OS user, started with `pg_ctl` on a free
//! port of 127.0.0.1 and a socket directory of its own, with a
//! password-authenticated role owning one database. Stopped and removed
//! when dropped. Never the machine's own cluster.
//!
//! A missing PostgreSQL is a failure, not a skip: the central store's
//! guarantees are not tested without it (`scripts/setup` installs it).

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The role the store connects as, and its database: not a superuser, so
/// the store is tested with the rights a fleet's operator would give it.
pub const ROLE: &str = "airlock";
pub const DATABASE: &str = "airlock";
/// The superuser, for the tests' own SQL (tampering, counting).
const SUPERUSER: &str = "postgres";

/// One running PostgreSQL server, its data and sockets in a temporary
/// directory owned by the `postgres` user.
#[derive(Debug)]
pub struct PgServer {
    dir: TempDir,
    bin: PathBuf,
    uid: u32,
    gid: u32,
    port: u16,
    password: String,
    superuser_password: String,
    /// Serves TLS with this certificate (server.crt, server.key).
    tls: bool,
}

impl PgServer {
    /// Initializes and starts a server; panics (naming the package to
    /// install) when PostgreSQL is missing.
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// A server that also offers TLS, with this certificate and key (PEM).
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> Self {
        Self::start_with(Some((cert_pem, key_pem)))
    }

    fn start_with(tls: Option<(&str, &str)>) -> Self {
        let bin = bindir();
        let user = nix::unistd::User::from_name("postgres")
            .ok()
            .flatten()
            .unwrap_or_else(|| {
                panic!("PostgreSQL is missing: no `postgres` user; install Debian's `postgresql` package (scripts/setup does)")
            });
        let dir = tempfile::Builder::new()
            .prefix("airlock-pg-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        nix::unistd::chown(dir.path(), Some(user.uid), Some(user.gid)).unwrap();
        let server = Self {
            dir,
            bin,
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            port: 0,
            password: format!("pw-{}", random_hex()),
            superuser_password: format!("su-{}", random_hex()),
            tls: tls.is_some(),
        };
        server.initdb();
        if let Some((cert, key)) = tls {
            for (name, text) in [("server.crt", cert), ("server.key", key)] {
                let path = server.dir.path().join(name);
                std::fs::write(&path, text).unwrap();
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
                nix::unistd::chown(&path, Some(user.uid), Some(user.gid)).unwrap();
            }
        }
        server.launch_on_free_port()
    }

    /// `postgres://airlock:PASSWORD@127.0.0.1:PORT/airlock`, TLS off (the
    /// server offers none unless started with it).
    pub fn url(&self) -> String {
        format!(
            "postgres://{ROLE}:{}@127.0.0.1:{}/{DATABASE}?sslmode=disable",
            self.password, self.port
        )
    }

    /// The same URL without its password (for PGPASSWORD or a password file).
    pub fn url_without_password(&self) -> String {
        format!(
            "postgres://{ROLE}@127.0.0.1:{}/{DATABASE}?sslmode=disable",
            self.port
        )
    }

    /// The role's password.
    pub fn password(&self) -> &str {
        &self.password
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Runs SQL as the superuser through `psql` and returns what it printed
    /// (unaligned, tuples only: one row a line, columns split by `|`).
    /// Panics when psql fails.
    pub fn psql(&self, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", SUPERUSER, "-d", DATABASE, "-c", sql])
            .env("PGPASSWORD", &self.superuser_password)
            .env("PGSSLMODE", "disable")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Kills the postmaster with SIGKILL, as a crash would: its backends
    /// notice and exit, and nothing is shut down cleanly.
    pub fn kill9(&self) {
        let pid = self.postmaster_pid();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the server again on the same port and directory (after
    /// [`Self::kill9`]): it recovers from its WAL as after a crash.
    pub fn restart(&self) {
        // The killed postmaster's backends may hold its shared memory for a
        // moment after it died; the start is retried until they are gone.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.pg_ctl_start(self.port);
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "restarting PostgreSQL failed: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn sockets(&self) -> PathBuf {
        self.dir.path().join("sockets")
    }

    fn postmaster_pid(&self) -> i32 {
        let text = std::fs::read_to_string(self.data().join("postmaster.pid")).unwrap();
        text.lines().next().unwrap().trim().parse().unwrap()
    }

    /// A command run as the `postgres` user, from its own directory.
    fn as_postgres(&self, tool: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(tool));
        cmd.uid(self.uid)
            .gid(self.gid)
            .current_dir(self.dir.path())
            .env_remove("PGPASSWORD")
            .env("LC_ALL", "C");
        cmd
    }

    fn initdb(&self) {
        let pwfile = self.dir.path().join("pwfile");
        std::fs::write(&pwfile, format!("{}\n", self.superuser_password)).unwrap();
        nix::unistd::chown(
            &pwfile,
            Some(nix::unistd::Uid::from_raw(self.uid)),
            Some(nix::unistd::Gid::from_raw(self.gid)),
        )
        .unwrap();
        std::fs::create_dir(self.sockets()).unwrap();
        nix::unistd::chown(
            &self.sockets(),
            Some(nix::unistd::Uid::from_raw(self.uid)),
            Some(nix::unistd::Gid::from_raw(self.gid)),
        )
        .unwrap();
        let out = self
            .as_postgres("initdb")
            .arg("-D")
            .arg(self.data())
            .args(["-U", SUPERUSER, "--auth=scram-sha-256", "-E", "UTF8"])
            // A default collation that ignores punctuation (ICU, alternate
            // shifted), as a database a fleet already runs may have: where
            // '.' and '/' do not order as bytes, a store whose ranges relied
            // on the database's collation would search wrong.
            .args(["--locale-provider=icu", "--icu-locale=und-u-ka-shifted"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .args(["--no-sync", "--no-instructions"])
            .output()
            .unwrap();
        checked("initdb", &out);
        std::fs::remove_file(&pwfile).unwrap();
    }

    fn pg_ctl_start(&self, port: u16) -> Output {
        let mut opts = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            self.sockets().display()
        );
        if self.tls {
            let dir = self.dir.path().display();
            opts.push_str(&format!(
                " -c ssl=on -c ssl_cert_file={dir}/server.crt -c ssl_key_file={dir}/server.key"
            ));
        }
        self.as_postgres("pg_ctl")
            .arg("start")
            .arg("-w")
            .args(["-t", "30"])
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-o", &opts])
            .output()
            .unwrap()
    }

    /// Starts on a port free a moment ago; another test may take it first,
    /// so a failed start is retried on another.
    fn launch_on_free_port(mut self) -> Self {
        for _ in 0..5 {
            let port = free_port();
            let out = self.pg_ctl_start(port);
            if out.status.success() {
                self.port = port;
                self.create_role();
                return self;
            }
        }
        panic!("PostgreSQL did not start: {}", self.log());
    }

    fn create_role(&self) {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", SUPERUSER, "-d", "postgres"])
            .args([
                "-c",
                &format!("CREATE ROLE {ROLE} LOGIN PASSWORD '{}'", self.password),
            ])
            .args(["-c", &format!("CREATE DATABASE {DATABASE} OWNER {ROLE}")])
            .env("PGPASSWORD", &self.superuser_password)
            .env("PGSSLMODE", "disable")
            .output()
            .unwrap();
        checked("creating the test role", &out);
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // Immediate: the data is thrown away with the directory anyway.
        let _ = self
            .as_postgres("pg_ctl")
            .arg("stop")
            .args(["-m", "immediate", "-w", "-D"])
            .arg(self.data())
            .output();
    }
}

/// Where PostgreSQL's server programs are: `pg_config --bindir`, else the
/// newest of Debian's /usr/lib/postgresql/*/bin.
fn bindir() -> PathBuf {
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|d| d.join("initdb").exists() && d.join("pg_ctl").exists());
    if let Some(dir) = from_pg_config {
        return dir;
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|d| d.join("initdb").exists() && d.join("pg_ctl").exists())
        .collect();
    found.sort_by_key(|d| {
        d.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    found.pop().unwrap_or_else(|| {
        panic!("PostgreSQL is missing: no initdb/pg_ctl found (pg_config --bindir, /usr/lib/postgresql/*/bin); install Debian's `postgresql` package (scripts/setup does)")
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn random_hex() -> String {
    let mut bytes = [0u8; 12];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn checked(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_server_takes_its_roles_password_survives_kill_9_and_is_gone_when_dropped() {
        let pg = PgServer::start();
        assert_eq!(pg.psql("SELECT current_database()"), DATABASE);
        let psql_as_role = |password: &str| {
            Command::new(pg.bin.join("psql"))
                .args(["-X", "-A", "-t", "-h", "127.0.0.1", "-p"])
                .arg(pg.port().to_string())
                .args(["-U", ROLE, "-d", DATABASE, "-c", "SELECT 1"])
                .env("PGPASSWORD", password)
                .output()
                .unwrap()
        };
        assert!(psql_as_role(pg.password()).status.success());
        assert!(!psql_as_role("wrong").status.success());
        pg.psql("CREATE TABLE t (x int); INSERT INTO t VALUES (7)");
        pg.kill9();
        assert!(!psql_as_role(pg.password()).status.success());
        pg.restart();
        assert_eq!(pg.psql("SELECT x FROM t"), "7");
        let data = pg.data();
        drop(pg);
        assert!(!data.exists());
    }
}
