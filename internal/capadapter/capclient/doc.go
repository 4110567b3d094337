// Package capclient runs local capability adapters, whose wire is package capadapter: one child
// process (Client) and the Supervisor of many registrations.
//
// A Client is one child: started without a shell, with only the environment variables in
// envAllowlist (PATH, HOME, USER, LOGNAME, TMPDIR, LANG, LC_ALL, LC_CTYPE, TZ) and those its
// registration names (PassEnv, checked by CheckPassEnv), in its own
// process group, its stderr kept in a bounded ring for the operator (Logs) and never
// projected. Startup is list, then describe of each listed id (byte-identical after canonical
// encoding), within the start deadline. Any malformed, oversized, late, duplicate, wrong-id or
// wrong-version response, EOF or timeout fails the call and SIGKILLs the whole process group,
// which is then reaped, so a stale response can never pair with a later request. A graceful
// stop closes stdin, waits, SIGTERMs the group, waits, SIGKILLs it, each wait bounded.
//
// # Supervisor
//
// A Supervisor runs many registrations (name, command, args, passEnv), each up to 8 capabilities, with
// capability ids unique across it. Register starts and validates the adapter before it
// returns, so the caller persists only what works; a replaced registration's child is reaped
// before Register returns. A child that dies is restarted with exponential backoff
// (DefaultBackoffMin doubling to DefaultBackoffMax, reset after DefaultHealthyAfter) while its
// capabilities report unavailable; Status shows state, pid, restarts and the last failure.
// Invoke checks the action and its args against the descriptor before the child is called,
// and results pass semantic screens (capadapter.ScreenResult) before they are returned. A
// well-formed, correctly paired result that fails a screen is withheld from its caller
// (result_withheld) for that call only: the child is neither killed nor restarted, and the
// adapter's log and Status name the capability, the call and the screen, never the result.
// List shows a capability unavailable while its adapter is not ready, and also while its last
// UnavailableAfter calls all ended unavailable (availability.go); neither refuses a call.
//
// Errors are *capadapter.Error values with stable codes (errors.Is compares codes).
package capclient
