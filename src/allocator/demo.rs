//! Placeholder: the demo feeder comes in a later commit.
