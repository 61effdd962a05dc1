//! speechstream-engine-libtorch: the hibari voice natively in tch. Not yet implemented: see issue "The real voice".
