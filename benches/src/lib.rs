//! Shared helpers for orderly benchmark programs (each program lives in `src/bin/`).
