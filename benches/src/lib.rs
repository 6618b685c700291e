//! Shared helpers for orderly benchmark programs (each program lives in `src/bin/`): the
//! side-by-side workload ([`workload`]), the handler log and its verifier ([`verify`]), the reply
//! check of the reply scenarios ([`replies`]), and the SVG charts of the harness ([`svg`]).

pub mod replies;
pub mod svg;
pub mod verify;
pub mod workload;
