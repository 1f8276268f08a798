"""Finding backends and calling their hooks: discovery, dispatch, and the wrapper plugins
(tracing, fault injection) that apply to every backend."""
