package target

import "errors"

// Errors of configuration: New, AddSubsystem, AddNamespace.
var (
	// ErrInvalidOption: an option value is out of range (see options.go).
	ErrInvalidOption = errors.New("target: invalid option")
	// ErrInvalidNQN: a subsystem or host NQN is not a valid NQN, or names
	// the discovery subsystem where an NVM subsystem is meant.
	ErrInvalidNQN = errors.New("target: invalid NQN")
	// ErrSubsystemExists: AddSubsystem was given an NQN already in use.
	ErrSubsystemExists = errors.New("target: subsystem already exists")
	// ErrNamespaceExists: the NSID is already in use in the subsystem.
	ErrNamespaceExists = errors.New("target: namespace ID already in use")
	// ErrNoNamespace: the subsystem has no namespace with that NSID.
	ErrNoNamespace = errors.New("target: no such namespace")
	// ErrInvalidNamespace: a namespace configuration is unusable: NSID out
	// of range, block size not 512 or 4096, no device, or a device smaller
	// than one block.
	ErrInvalidNamespace = errors.New("target: invalid namespace configuration")
)

// Errors of operation.
var (
	// ErrClosed: the target was shut down.
	ErrClosed = errors.New("target: closed")
	// ErrListenerExists: Listen was given an address already listened on.
	ErrListenerExists = errors.New("target: already listening there")
	// ErrNoListener: StopListening was given an address not listened on.
	ErrNoListener = errors.New("target: no listener there")
	// ErrNoSubsystem: RemoveSubsystem was given an NQN of no NVM subsystem.
	ErrNoSubsystem = errors.New("target: no such subsystem")
	// ErrInvalidANA: SetANAState was given a state that is not one of the
	// five, a group past MaxANAGroups, or the discovery subsystem.
	ErrInvalidANA = errors.New("target: invalid ANA state or group")
)
