//! Harness for end-to-end tests against real controllers.
