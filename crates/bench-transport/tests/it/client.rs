//! client tests
