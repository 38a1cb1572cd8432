//! The reference interpreter (to be written).
