//! A journeys suite as a run (work in progress).
