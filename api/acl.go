package api

// Headers and codes of the ACL system (see docs/acl.md).
const (
	// HeaderToken carries a request's token secret; "Authorization: Bearer <secret>" is the
	// other way to send it.
	HeaderToken = "X-Raftlock-Token"
	// CodeAlreadyExists refuses to create a policy whose name is in use (409).
	CodeAlreadyExists = "already_exists"
)

// Access levels of a lock rule (deny, read, write) and of a policy's operator field (none,
// read, write).
const (
	AccessDeny  = "deny"
	AccessNone  = "none"
	AccessRead  = "read"
	AccessWrite = "write"
)

// ManagementPolicy is the built-in policy that allows everything.
const ManagementPolicy = "management"

// LockRule grants an access level to the locks whose names start with Prefix.
type LockRule struct {
	Prefix string `json:"prefix"`
	Access string `json:"access"`
}

// Policy is the body of POST /v1/acl/policies and PUT /v1/acl/policies/{name}, and what the
// policy endpoints answer. The indexes are set in answers and ignored in requests.
type Policy struct {
	Name        string     `json:"name"`
	Locks       []LockRule `json:"locks"`
	Operator    string     `json:"operator"`
	CreateIndex uint64     `json:"create_index,omitempty"`
	ModifyIndex uint64     `json:"modify_index,omitempty"`
}

// PolicyList is the body of GET /v1/acl/policies.
type PolicyList struct {
	Policies []Policy `json:"policies"`
}

// BootstrapResponse is the body of POST /v1/acl/bootstrap: the first management token, with
// the only copy of its secret.
type BootstrapResponse struct {
	AccessorID string   `json:"accessor_id"`
	SecretID   string   `json:"secret_id"`
	Policies   []string `json:"policies"`
}

// CreateTokenRequest is the body of POST /v1/acl/tokens.
type CreateTokenRequest struct {
	Description string   `json:"description,omitempty"`
	Policies    []string `json:"policies"`
}

// NewToken is the answer of POST /v1/acl/tokens: the only response that holds the secret.
type NewToken struct {
	AccessorID  string   `json:"accessor_id"`
	SecretID    string   `json:"secret_id"`
	Description string   `json:"description"`
	Policies    []string `json:"policies"`
	CreateIndex uint64   `json:"create_index"`
}

// Token describes a token without its secret, as the GET endpoints answer.
type Token struct {
	AccessorID  string   `json:"accessor_id"`
	Description string   `json:"description"`
	Policies    []string `json:"policies"`
	CreateIndex uint64   `json:"create_index"`
}

// TokenList is the body of GET /v1/acl/tokens.
type TokenList struct {
	Tokens []Token `json:"tokens"`
}

// DeleteResponse is the body of a successful DELETE of a policy or token.
type DeleteResponse struct {
	Deleted bool `json:"deleted"`
}
