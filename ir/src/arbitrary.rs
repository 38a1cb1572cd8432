//! proptest strategies for random well-formed graphs (to be written).
