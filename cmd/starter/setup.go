package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/turnstile-rl/turnstile/trainer"
)

func newSetupCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "setup",
		Short: "Prepare a namespace of any Temporal cluster: check it exists, register turnstile's search attributes (idempotent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				res, err := c.Setup(cmd.Context(), g.namespace)
				if err != nil {
					return err
				}
				return g.emit(cmd.OutOrStdout(), res, func(w io.Writer) error {
					_, err := fmt.Fprintf(w, "namespace %s at %s: registered %s; already there %s\n",
						res.Namespace, g.addr, orNone(res.Registered), orNone(res.Present))
					return err
				})
			})
		},
	}
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
