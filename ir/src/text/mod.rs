//! The `.smelt` text format (to be written).
