//! Shared helpers for orderly benchmark programs (each program lives in `src/bin/`): the
//! side-by-side workload ([`workload`]), the handler log and its verifier ([`verify`]), and the
//! SVG charts of the harness ([`svg`]).

pub mod svg;
pub mod verify;
pub mod workload;
