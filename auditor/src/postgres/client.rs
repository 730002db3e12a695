//! A blocking PostgreSQL client over tokio-postgres whose socket is made
//! here, not by the driver: so that it can carry the sidecar's socket mark
//! (the capture rules a sidecar installs leave only marked sockets alone,
//! so an unmarked connection to the central store would be captured by its
//! own proxy), and so that a path that goes silent is noticed in seconds
//! (TCP user timeout and keepalives) rather than after TCP gives up.
//!
//! The `postgres` crate's client cannot take a socket, hence this thin
//! layer with the same shape: each call runs the driver's future on a
//! current-thread runtime of the client's own, which also drives the
//! connection. Callers inside tokio call it from `spawn_blocking`.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::OnceLock;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::SinkExt;
use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};
use tokio::runtime::Runtime;
use tokio_postgres::Statement;
use tokio_postgres::config::Host;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::types::ToSql;
pub(crate) use tokio_postgres::{Error, IsolationLevel, Portal, Row};

/// How long a connection attempt may take when the URL sets no
/// `connect_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long sent data may stay unacknowledged before the connection is
/// given up (TCP_USER_TIMEOUT): a dropped path fails within this.
const USER_TIMEOUT: Duration = Duration::from_secs(10);
/// Keepalive probes on an idle connection, so that a silent path is
/// noticed before the next write.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);

/// The mark every connection to a central store carries, once set.
static SOCKET_MARK: OnceLock<u32> = OnceLock::new();

/// Marks every later connection to a central store with `mark` (SO_MARK,
/// see socket(7)): the sidecar's own sockets are the ones its capture
/// rules let pass. Set once per process; later calls are ignored.
pub fn mark_connections(mark: u32) {
    let _ = SOCKET_MARK.set(mark);
}

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Postgres(#[from] Error),
}

/// One open connection.
pub(crate) struct Client {
    runtime: Runtime,
    inner: tokio_postgres::Client,
    /// The statements a shipped batch runs, prepared once on this
    /// connection: a batch then costs one round trip a statement, and the
    /// server parses and plans each once, not once a batch.
    prepared: Prepared,
    /// The buffer a raw binary COPY is built in, kept for the next.
    copy_buf: BytesMut,
}

type Prepared = HashMap<&'static str, Statement>;

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

impl Client {
    /// Opens a connection as `config` says, on a socket of our own.
    pub(crate) fn connect<T>(
        config: &tokio_postgres::Config,
        mut tls: T,
    ) -> Result<Self, ConnectError>
    where
        T: MakeTlsConnect<tokio::net::TcpStream>,
        T::Stream: Send + 'static,
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (host, addrs) = target(config)?;
        let timeout = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(CONNECT_TIMEOUT);
        let socket = connect_socket(&addrs, timeout)?;
        let inner = runtime.block_on(async {
            let stream = tokio::net::TcpStream::from_std(socket)?;
            let tls = tls
                .make_tls_connect(&host)
                .map_err(|e| std::io::Error::other(e.into()))?;
            let (client, connection) = config.connect_raw(stream, tls).await?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!("central store connection ended: {e}");
                }
            });
            Ok::<_, ConnectError>(client)
        })?;
        Ok(Self {
            runtime,
            inner,
            prepared: Prepared::new(),
            copy_buf: BytesMut::new(),
        })
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    pub(crate) fn transaction(&mut self) -> Result<Transaction<'_>, Error> {
        let tx = self.runtime.block_on(self.inner.transaction())?;
        Ok(Transaction {
            runtime: &self.runtime,
            tx,
            prepared: &mut self.prepared,
            copy_buf: &mut self.copy_buf,
        })
    }

    /// A transaction with options: `isolation` and `read_only`.
    pub(crate) fn transaction_with(
        &mut self,
        isolation: IsolationLevel,
        read_only: bool,
    ) -> Result<Transaction<'_>, Error> {
        let builder = self
            .inner
            .build_transaction()
            .isolation_level(isolation)
            .read_only(read_only);
        let tx = self.runtime.block_on(builder.start())?;
        Ok(Transaction {
            runtime: &self.runtime,
            tx,
            prepared: &mut self.prepared,
            copy_buf: &mut self.copy_buf,
        })
    }
}

/// One open transaction: rolled back when dropped uncommitted.
pub(crate) struct Transaction<'a> {
    runtime: &'a Runtime,
    tx: tokio_postgres::Transaction<'a>,
    prepared: &'a mut Prepared,
    copy_buf: &'a mut BytesMut,
}

impl Transaction<'_> {
    pub(crate) fn commit(self) -> Result<(), Error> {
        self.runtime.block_on(self.tx.commit())
    }

    pub(crate) fn bind(&mut self, sql: &str, params: Params<'_>) -> Result<Portal, Error> {
        self.runtime.block_on(self.tx.bind(sql, params))
    }

    /// Runs `sql`, prepared once on this connection and reused after.
    pub(crate) fn execute_prepared(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<u64, Error> {
        let statement = self.prepare(sql)?;
        self.runtime.block_on(self.tx.execute(&statement, params))
    }

    /// The one row `sql` returns, prepared once on this connection.
    pub(crate) fn query_one_prepared(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Row, Error> {
        let statement = self.prepare(sql)?;
        self.runtime.block_on(self.tx.query_one(&statement, params))
    }

    fn prepare(&mut self, sql: &'static str) -> Result<Statement, Error> {
        if let Some(statement) = self.prepared.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.runtime.block_on(self.tx.prepare(sql))?;
        self.prepared.insert(sql, statement.clone());
        Ok(statement)
    }

    /// Sends `sql` (a `COPY … FROM STDIN (FORMAT binary)`) the tuples
    /// `write` appends, already in binary COPY form: the header and the
    /// trailer are added here, and the whole goes as one chunk from a
    /// buffer kept for the next COPY.
    pub(crate) fn copy_in_binary_raw(
        &mut self,
        sql: &'static str,
        write: impl FnOnce(&mut BytesMut),
    ) -> Result<u64, Error> {
        let statement = self.prepare(sql)?;
        let buf = &mut *self.copy_buf;
        buf.clear();
        // Signature, flags (none), header extension (none).
        buf.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
        buf.extend_from_slice(&0i32.to_be_bytes());
        buf.extend_from_slice(&0i32.to_be_bytes());
        write(buf);
        buf.extend_from_slice(&(-1i16).to_be_bytes());
        // The chunk is dropped once the driver has copied it out, and the
        // buffer then gets its allocation back (BytesMut::reserve).
        let chunk = buf.split().freeze();
        self.runtime.block_on(async {
            let sink = self.tx.copy_in::<_, Bytes>(&statement).await?;
            let mut sink = std::pin::pin!(sink);
            sink.send(chunk).await?;
            sink.finish().await
        })
    }

    pub(crate) fn query_portal(
        &mut self,
        portal: &Portal,
        max_rows: i32,
    ) -> Result<Vec<Row>, Error> {
        self.runtime
            .block_on(self.tx.query_portal(portal, max_rows))
    }
}

/// What both a connection and a transaction run: the queries.
pub(crate) trait Queries {
    fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, Error>;
    fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, Error>;
    fn batch_execute(&mut self, sql: &str) -> Result<(), Error>;

    fn query_opt(&mut self, sql: &str, params: Params<'_>) -> Result<Option<Row>, Error> {
        // As the driver's query_opt: more than one row is the caller's bug,
        // and the first is what it asked for.
        Ok(self.query(sql, params)?.into_iter().next())
    }

    fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, Error>;
}

impl Queries for Client {
    fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, Error> {
        self.runtime.block_on(self.inner.query(sql, params))
    }

    fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, Error> {
        self.runtime.block_on(self.inner.execute(sql, params))
    }

    fn batch_execute(&mut self, sql: &str) -> Result<(), Error> {
        self.runtime.block_on(self.inner.batch_execute(sql))
    }

    fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, Error> {
        self.runtime.block_on(self.inner.query_one(sql, params))
    }
}

impl Queries for Transaction<'_> {
    fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, Error> {
        self.runtime.block_on(self.tx.query(sql, params))
    }

    fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, Error> {
        self.runtime.block_on(self.tx.execute(sql, params))
    }

    fn batch_execute(&mut self, sql: &str) -> Result<(), Error> {
        self.runtime.block_on(self.tx.batch_execute(sql))
    }

    fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, Error> {
        self.runtime.block_on(self.tx.query_one(sql, params))
    }
}

/// The host name (for TLS) and the addresses to try: `hostaddr` when the
/// URL gives one, else the host resolved.
fn target(config: &tokio_postgres::Config) -> Result<(String, Vec<SocketAddr>), ConnectError> {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        Some(Host::Unix(path)) => {
            return Err(std::io::Error::other(format!(
                "{} is a Unix socket directory; the central store is reached over TCP: give host=NAME",
                path.display()
            ))
            .into());
        }
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let addrs: Vec<SocketAddr> = match config.get_hostaddrs().first() {
        Some(ip) => vec![SocketAddr::new(*ip, port)],
        None => match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => (host.as_str(), port).to_socket_addrs()?.collect(),
        },
    };
    Ok((host, addrs))
}

/// A connected, non-blocking socket to the first address that answers.
fn connect_socket(
    addrs: &[SocketAddr],
    timeout: Duration,
) -> Result<std::net::TcpStream, ConnectError> {
    let mut last = std::io::Error::other("the host name resolved to no address");
    for addr in addrs {
        match open(addr, timeout) {
            Ok(socket) => return Ok(socket),
            Err(e) => last = e,
        }
    }
    Err(last.into())
}

fn open(addr: &SocketAddr, timeout: Duration) -> std::io::Result<std::net::TcpStream> {
    let socket = Socket::new(
        Domain::for_address(*addr),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    if let Some(mark) = SOCKET_MARK.get() {
        socket.set_mark(*mark)?;
    }
    socket.connect_timeout(&(*addr).into(), timeout)?;
    let tcp = SockRef::from(&socket);
    tcp.set_tcp_nodelay(true)?;
    tcp.set_tcp_user_timeout(Some(USER_TIMEOUT))?;
    tcp.set_tcp_keepalive(
        &TcpKeepalive::new()
            .with_time(KEEPALIVE_IDLE)
            .with_interval(KEEPALIVE_INTERVAL),
    )?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}
