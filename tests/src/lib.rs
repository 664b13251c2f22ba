//! dynvram-tests
