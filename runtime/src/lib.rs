//! Devices, kernel caches, memory planning and launches.
//!
//! Not built yet beyond device naming (issues 4 and 5).
