package conformance

import (
	"testing"
)

// Env says how the suite reaches one provider.
type Env struct {
	// ListenURL returns a URL to listen on that no other listener uses,
	// such as "iwarp://127.0.0.1:0" or "shm://conformance-1234-7". It is
	// called for every listener the suite starts; a case has at most one
	// listening at a time. The suite opens its PDs and connects with the
	// address the Listener reports (Listener.Addr).
	ListenURL func() string

	// CompleteOnHandoff says that Sends and Writes complete once they are
	// handed to the transport, before the peer has checked them (iWARP).
	// A remote access or receiver-not-ready error may then follow their
	// successful completion, as rdma/doc.go allows; without it the suite
	// requires the WR itself to complete with the error.
	CompleteOnHandoff bool
}

// A suiteCase is one named subtest of Run.
type suiteCase struct {
	name string
	fn   func(t *testing.T, env Env)
}

// cases lists the suite in the order Run runs it.
var cases = []suiteCase{
	// Two-sided operations.
	{"SendRecvSGL", testSendRecvSGL},
	{"SendZeroLength", testSendZeroLength},
	{"RecvTooSmall", testRecvTooSmall},
	{"Inline", testInline},
	{"InlineUnregistered", testInlineUnregistered},
	{"InlineTooLarge", testInlineTooLarge},
	{"SendImm", testSendImm},
	{"WriteImm", testWriteImm},
	{"SendInv", testSendInv},

	// One-sided operations and ordering.
	{"WriteRead", testWriteRead},
	{"WriteReadSGL", testWriteReadSGL},
	{"OrderWriteSend", testOrderWriteSend},
	{"OrderWriteRead", testOrderWriteRead},

	// Queues and signaling.
	{"Batch1000", testBatch1000},
	{"QueueFull", testQueueFull},
	{"PostErrors", testPostErrors},
	{"Unsignaled", testUnsignaled},

	// Remote access errors.
	{"AccessWrongRKey", testAccessWrongRKey},
	{"AccessOutOfBounds", testAccessOutOfBounds},
	{"AccessMissingRight", testAccessMissingRight},
	{"AccessAfterDeregister", testAccessAfterDeregister},

	// Receiver not ready.
	{"RNRExceeded", testRNRExceeded},
	{"RNRRescued", testRNRRescued},

	// Failures mid-transfer.
	{"SetErrorFlushes", testSetErrorFlushes},
	{"PeerKilled", testPeerKilled},
	{"LocalCloseMidTransfer", testLocalCloseMidTransfer},

	// Many QPs.
	{"ManyQPsSharedCQ", testManyQPsSharedCQ},
	{"ManyQPsCQEach", testManyQPsCQEach},

	// Completion queues.
	{"CQPollBatch", testCQPollBatch},
	{"CQWaitCancel", testCQWaitCancel},

	// Connection management.
	{"ConnPrivateData", testConnPrivateData},
	{"ConnReject", testConnReject},
	{"ConnNothingListening", testConnNothingListening},
	{"ListenerCloseUnblocksAccept", testListenerCloseUnblocksAccept},
}

// Run runs the conformance suite against the provider env describes, one
// subtest per case, so a failure reads as TestX/<provider>/<case>.
func Run(t *testing.T, env Env) {
	if env.ListenURL == nil {
		t.Fatal("conformance: Env.ListenURL is nil")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, env) })
	}
}
