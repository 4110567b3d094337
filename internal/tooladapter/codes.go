package tooladapter

import "github.com/airlockhq/airlock/internal/protocol"

// Error codes of the host tool-adapter protocol. Each is stable: the daemon returns them to
// clients unchanged, and docs/tool-adapters.md lists what provokes each one.
const (
	// Descriptor admission (ParseDescriptor).
	CodeInvalidDescriptor        = "invalid_tool_adapter_descriptor"
	CodeUnsupportedVersion       = "unsupported_tool_adapter_version"
	CodeInvalidIdentity          = "invalid_tool_adapter_identity"
	CodeInvalidEndpoint          = "invalid_tool_adapter_endpoint"
	CodeInvalidBinding           = "invalid_tool_adapter_binding"
	CodeInvalidCapability        = "invalid_tool_adapter_capability"
	CodeUnsupportedOp            = "unsupported_tool_operation"
	CodeInvalidLimit             = "invalid_tool_adapter_limit"
	CodeInvalidField             = "invalid_tool_adapter_field"
	CodeBindingMismatch          = "tool_adapter_binding_mismatch"
	CodeIdentityMismatch         = "tool_adapter_identity_mismatch"
	CodeContractMismatch         = "tool_adapter_contract_mismatch"
	CodeInvalidPath              = "invalid_tool_adapter_path"
	CodeSessionConflict          = "adapter_session_conflict"
	CodeRegistryClosed           = "adapter_registry_closed"
	CodeEndpointInsecure         = "adapter_endpoint_insecure"
	CodeRootInvalid              = "adapter_root_invalid"
	CodePathInvalid              = "adapter_path_invalid"
	CodePathSymlink              = "adapter_path_symlink"
	CodePathUnavailable          = "adapter_path_unavailable"
	CodeConnectTimeout           = "adapter_connect_timeout"
	CodeBindTimeout              = "adapter_bind_timeout"
	CodeConnectionFailed         = "adapter_connection_failed"
	CodeConnectionClosed         = "adapter_connection_closed"
	CodeSecretReflected          = "adapter_secret_reflected"
	CodeProtocolInvalid          = "adapter_protocol_invalid"
	CodeSessionClosed            = "adapter_session_closed"
	CodeOperationDenied          = "adapter_operation_denied"
	CodeRequestInvalid           = "adapter_request_invalid"
	CodeRequestTooLarge          = "adapter_request_too_large"
	CodeQueueCapacity            = "adapter_queue_capacity"
	CodeRequestTimeout           = "adapter_request_timeout"
	CodeRequestAborted           = "adapter_request_aborted"
	CodeAbortCapacity            = "adapter_abort_capacity"
	CodeResponseMismatch         = "adapter_response_mismatch"
	CodeAdapterError             = "adapter_error"
	DetailIndeterminate          = "indeterminate"
	DetailRetryAfterMs           = "retryAfterMs"
	DetailField                  = "field"
	DetailReason                 = "reason"
	redacted                     = "[redacted]"
	maxSafeInteger         int64 = 1<<53 - 1
)

// fieldError returns a non-retryable error that names the offending member in details.field.
// The message never quotes the member's value: values may be secrets or private paths.
func fieldError(code, field, format string, args ...any) *protocol.Error {
	return protocol.Errorf(code, format, args...).With(DetailField, field)
}
