package httpapi

// ReservedActions are the last path segments of a lock path that route to actions, for the
// tests that match paths to docs/openapi.yaml.
var ReservedActions = reservedActions
