//! Which handler serves which path, after the token and Host checks.

use std::sync::Arc;

use http::{Method, Request, Response, StatusCode};

use crate::auth::{self, Access, Refused};
use crate::respond::{self, Body};
use crate::server::State;
use crate::{api, assets};

pub(crate) async fn handle<B>(state: Arc<State>, req: Request<B>) -> Response<Body> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return respond::text(
            StatusCode::METHOD_NOT_ALLOWED,
            "405: the console is read-only; it answers GET only\n",
        );
    }
    let query = req.uri().query().map(str::to_owned);
    let access = match auth::check(&state.token, state.port, req.headers(), query.as_deref()) {
        Ok(access) => access,
        Err(Refused::ForeignHost) => {
            return respond::text(
                StatusCode::FORBIDDEN,
                "403: open the console by the address `airlock audit serve` printed (127.0.0.1 or localhost)\n",
            );
        }
        Err(Refused::NoToken) => {
            return respond::text(
                StatusCode::UNAUTHORIZED,
                "401: this console needs its access token; open the URL `airlock audit serve` printed\n",
            );
        }
    };
    let path = req.uri().path();
    match path {
        "/" if access == Access::Query => {
            respond::redirect_with_cookie("/", auth::set_cookie(&state.token, state.port))
        }
        "/" | "/index.html" => page("index.html"),
        "/favicon.ico" => page("favicon.svg"),
        _ => {
            if let Some(name) = path.strip_prefix("/assets/") {
                page(name)
            } else if let Some(rest) = path.strip_prefix("/api/") {
                api::dispatch(state, rest, query.as_deref().unwrap_or("")).await
            } else {
                not_found()
            }
        }
    }
}

fn page(name: &str) -> Response<Body> {
    match assets::find(name) {
        Some((content_type, bytes)) => respond::asset(content_type, bytes),
        None => not_found(),
    }
}

fn not_found() -> Response<Body> {
    respond::text(StatusCode::NOT_FOUND, "404: no such page\n")
}
