//! The tracing frontend.
