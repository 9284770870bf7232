package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/spf13/cobra"
)

// newACLCmd groups the commands that manage tokens and policies (docs/acl.md).
func newACLCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "acl",
		Short: "Manage the tokens and policies of a cluster started with --acl",
		Long: `Manage the tokens and policies of a cluster started with --acl.

Bootstrap once to get the first management token, then give it with --token (or
$` + tokenEnv + `) to create policies and tokens.`,
	}
	policy := &cobra.Command{Use: "policy", Short: "Create, list, read and delete policies"}
	policy.AddCommand(newPolicyCreateCmd(), newPolicyListCmd(), newPolicyGetCmd(), newPolicyDeleteCmd())
	token := &cobra.Command{Use: "token", Short: "Create, list, read and delete tokens"}
	token.AddCommand(newTokenCreateCmd(), newTokenListCmd(), newTokenGetCmd(), newTokenDeleteCmd())
	cmd.AddCommand(newBootstrapCmd(), policy, token)
	return cmd
}

func newBootstrapCmd() *cobra.Command {
	var f inspectFlags
	return inspectCmd(&cobra.Command{
		Use:   "bootstrap",
		Short: "Create the cluster's first management token and print its secret (once per cluster)",
		Example: `  raftlock acl bootstrap
  export RAFTLOCK_TOKEN=$(raftlock acl bootstrap -o json | jq -r .secret_id)`,
		Args: cobra.NoArgs,
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, _ []string) error {
		b, err := c.Raw().ACLBootstrap(ctx)
		if err != nil {
			return failure("bootstrapping the ACLs", err)
		}
		if f.json() {
			return writeJSON(w, b)
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "accessor_id:\t%s\nsecret_id:\t%s\npolicies:\t%s\n", b.AccessorID, b.SecretID, strings.Join(b.Policies, ","))
		if err := tw.Flush(); err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, "\nKeep the secret: it is shown this once. Use it with --token or $"+tokenEnv+".")
		return err
	})
}

func newPolicyCreateCmd() *cobra.Command {
	var f inspectFlags
	var locks []string
	var operator string
	var replace bool
	cmd := inspectCmd(&cobra.Command{
		Use:   "create NAME [--lock PREFIX=ACCESS]... [--operator none|read|write]",
		Short: "Create a policy (with --replace, create or replace it)",
		Long: `Create a policy. Each --lock PREFIX=ACCESS grants ACCESS (deny, read or write) to the
locks whose names start with PREFIX ("" matches every name); for a lock, the rule with the
longest matching prefix wins, and no matching rule denies. --operator grants access to the
cluster: read for GET /v1/cluster and every session, write for members and leadership.`,
		Example: `  raftlock acl policy create jobs-writer --lock jobs/=write
  raftlock acl policy create reader --lock =read --lock secrets/=deny --operator read`,
		Args: cobra.ExactArgs(1),
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, args []string) error {
		p := api.Policy{Name: args[0], Locks: []api.LockRule{}, Operator: operator}
		for _, l := range locks {
			prefix, access, ok := strings.Cut(l, "=")
			if !ok {
				return &exitError{code: exitFailure, msg: fmt.Sprintf("--lock %q is not PREFIX=ACCESS", l)}
			}
			p.Locks = append(p.Locks, api.LockRule{Prefix: prefix, Access: access})
		}
		create := c.Raw().CreatePolicy
		if replace {
			create = c.Raw().PutPolicy
		}
		out, err := create(ctx, p)
		if err != nil {
			return failure("creating the policy", err)
		}
		return printPolicies(w, &f, []api.Policy{*out}, true)
	})
	cmd.Flags().StringArrayVar(&locks, "lock", nil, "a lock rule PREFIX=ACCESS, ACCESS deny, read or write (repeatable)")
	cmd.Flags().StringVar(&operator, "operator", api.AccessNone, "access to the cluster: none, read or write")
	cmd.Flags().BoolVar(&replace, "replace", false, "replace a policy of that name instead of failing")
	return cmd
}

func newPolicyListCmd() *cobra.Command {
	var f inspectFlags
	return inspectCmd(&cobra.Command{
		Use: "list", Short: "List the policies", Args: cobra.NoArgs,
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, _ []string) error {
		ps, err := c.Raw().Policies(ctx, f.readOpts()...)
		if err != nil {
			return failure("listing policies", err)
		}
		return printPolicies(w, &f, ps, false)
	})
}

func newPolicyGetCmd() *cobra.Command {
	var f inspectFlags
	return inspectCmd(&cobra.Command{
		Use: "get NAME", Short: "Show one policy", Args: cobra.ExactArgs(1),
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, args []string) error {
		p, err := c.Raw().Policy(ctx, args[0], f.readOpts()...)
		if err != nil {
			return failure("reading the policy", err)
		}
		return printPolicies(w, &f, []api.Policy{*p}, true)
	})
}

func newPolicyDeleteCmd() *cobra.Command {
	var f inspectFlags
	return inspectCmd(&cobra.Command{
		Use: "delete NAME", Short: "Delete a policy; tokens that had it lose it", Args: cobra.ExactArgs(1),
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, args []string) error {
		if err := c.Raw().DeletePolicy(ctx, args[0]); err != nil {
			return failure("deleting the policy", err)
		}
		if f.json() {
			return writeJSON(w, api.DeleteResponse{Deleted: true})
		}
		_, err := fmt.Fprintf(w, "policy %s deleted\n", args[0])
		return err
	})
}

// printPolicies writes policies as a table, or as JSON: the API's list, or its one object for
// a single policy.
func printPolicies(w io.Writer, f *inspectFlags, ps []api.Policy, single bool) error {
	if f.json() {
		if single {
			return writeJSON(w, ps[0])
		}
		return writeJSON(w, api.PolicyList{Policies: nonNil(ps)})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tOPERATOR\tLOCKS")
	for _, p := range ps {
		rules := make([]string, len(p.Locks))
		for i, r := range p.Locks {
			rules[i] = fmt.Sprintf("%q=%s", r.Prefix, r.Access)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, p.Operator, orDash(strings.Join(rules, " ")))
	}
	return tw.Flush()
}

func newTokenCreateCmd() *cobra.Command {
	var f inspectFlags
	var description string
	var policies []string
	cmd := inspectCmd(&cobra.Command{
		Use:   "create [--policy NAME]... [--description TEXT]",
		Short: "Create a token and print its secret (shown this once)",
		Example: `  raftlock acl token create --policy jobs-writer --description "nightly jobs"
  raftlock acl token create -o json | jq -r .secret_id`,
		Args: cobra.NoArgs,
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, _ []string) error {
		t, err := c.Raw().CreateToken(ctx, api.CreateTokenRequest{Description: description, Policies: policies})
		if err != nil {
			return failure("creating the token", err)
		}
		if f.json() {
			return writeJSON(w, t)
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "accessor_id:\t%s\nsecret_id:\t%s\ndescription:\t%s\npolicies:\t%s\ncreate_index:\t%d\n",
			t.AccessorID, t.SecretID, orDash(t.Description), orDash(strings.Join(t.Policies, ",")), t.CreateIndex)
		return tw.Flush()
	})
	cmd.Flags().StringVar(&description, "description", "", "what the token is for")
	cmd.Flags().StringArrayVar(&policies, "policy", nil, "a policy of the token (repeatable)")
	return cmd
}

func newTokenListCmd() *cobra.Command {
	var f inspectFlags
	return inspectCmd(&cobra.Command{
		Use: "list", Short: "List the tokens (never their secrets)", Args: cobra.NoArgs,
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, _ []string) error {
		ts, err := c.Raw().Tokens(ctx, f.readOpts()...)
		if err != nil {
			return failure("listing tokens", err)
		}
		return printTokens(w, &f, ts, false)
	})
}

func newTokenGetCmd() *cobra.Command {
	var f inspectFlags
	return inspectCmd(&cobra.Command{
		Use:   "get ACCESSOR_ID|self",
		Short: "Show one token (never its secret); self is the token of --token",
		Args:  cobra.ExactArgs(1),
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, args []string) error {
		get := func() (*api.Token, error) { return c.Raw().Token(ctx, args[0], f.readOpts()...) }
		if args[0] == "self" {
			get = func() (*api.Token, error) { return c.Raw().TokenSelf(ctx, f.readOpts()...) }
		}
		t, err := get()
		if err != nil {
			return failure("reading the token", err)
		}
		return printTokens(w, &f, []api.Token{*t}, true)
	})
}

func newTokenDeleteCmd() *cobra.Command {
	var f inspectFlags
	return inspectCmd(&cobra.Command{
		Use: "delete ACCESSOR_ID", Short: "Delete a token; every node refuses it from then on", Args: cobra.ExactArgs(1),
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, args []string) error {
		if err := c.Raw().DeleteToken(ctx, args[0]); err != nil {
			return failure("deleting the token", err)
		}
		if f.json() {
			return writeJSON(w, api.DeleteResponse{Deleted: true})
		}
		_, err := fmt.Fprintf(w, "token %s deleted\n", args[0])
		return err
	})
}

// printTokens writes tokens as a table, or as JSON: the API's list, or its one object for a
// single token.
func printTokens(w io.Writer, f *inspectFlags, ts []api.Token, single bool) error {
	if f.json() {
		if single {
			return writeJSON(w, ts[0])
		}
		return writeJSON(w, api.TokenList{Tokens: nonNil(ts)})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCESSOR ID\tPOLICIES\tCREATE INDEX\tDESCRIPTION")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", t.AccessorID, orDash(strings.Join(t.Policies, ",")), t.CreateIndex, orDash(t.Description))
	}
	return tw.Flush()
}
