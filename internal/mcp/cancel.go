package mcp

import (
	"context"
	"errors"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// CodeRequestCancelled is the JSON-RPC error code of a request whose handler ended because the
// request was cancelled, were its answer ever written. It is LSP's RequestCancelled, below the
// range JSON-RPC 2.0 reserves (-32768 to -32000), so that no reserved meaning is taken.
//
// A client does not see it for a call it cancelled with notifications/cancelled: MCP says
// that no response is sent then, and none is (the stdio drainer drops it, and over HTTP the
// call's SSE stream is closed before it). It stands where the SDK would otherwise write the
// handler's context error as it is, which has no code (0, not a JSON-RPC error code): a
// request cancelled because its session or its connection ended.
const CodeRequestCancelled = -32800

// codedErrors is the server's receiving middleware that gives every error the go-sdk would
// write without a JSON-RPC code one. The SDK's connection answers a request with what its
// handler returns, and writes an error that is not a *jsonrpc.Error with code 0, which is no
// JSON-RPC code. Two kinds of request end so:
//
//   - A request whose context is done when its handler returns (the tool handlers return the
//     context's error for a cancelled call, after the daemon's abortTool). Over Streamable
//     HTTP in a session (2025-11-25 and before) its POST's SSE stream is closed first, so the
//     response the SDK writes next reaches no stream and the client gets none
//     (RequestExtra.CloseSSEStream; without an event store nothing is kept for a resumption);
//     under 2026-07-28 that does nothing: the client closed the POST itself, which is how that
//     revision cancels. Whatever is written is CodeRequestCancelled. On stdio the drainer
//     drops the response to a request cancelled by notifications/cancelled (drainer.note,
//     drainWriter).
//   - An initialize the SDK refuses (a second one on a connection, or one after a call of the
//     stateless revision began the session): the client's request is wrong, -32600 Invalid
//     Request, with the SDK's message.
func codedErrors(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		res, err := next(ctx, method, req)
		if ctx.Err() != nil && isCall(method) {
			if extra := req.GetExtra(); extra != nil && extra.CloseSSEStream != nil {
				extra.CloseSSEStream(sdk.CloseSSEStreamArgs{})
			}
			if err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || wireCode(err) == 0) {
				return nil, &jsonrpc.Error{Code: CodeRequestCancelled, Message: "request cancelled"}
			}
			return res, err
		}
		if method == "initialize" && err != nil && wireCode(err) == 0 {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}
		}
		return res, err
	}
}

// isCall reports whether method is a request's, the only messages that are answered (a
// notification's method begins "notifications/").
func isCall(method string) bool { return !strings.HasPrefix(method, "notifications/") }

// wireCode is the JSON-RPC code err carries, or 0.
func wireCode(err error) int64 {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return 0
}
