//! Passes over the fxhlo IR (the pass manager and the optimizer come with the optimizer issue).
