package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/turnstile-rl/turnstile/trainer"
)

// newScheduleCmd is `starter schedule create|pause|unpause|trigger|tag|describe|list|delete`.
func newScheduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Checkpoints of a set on a Temporal Schedule (one per set, ID checkpoints/<set>)",
		Long: "Manage a set's checkpoint schedule: a Temporal Schedule whose every fire starts the Checkpoint workflow\n" +
			"(checkpoint id every-<set>-<fire time>); a fire while the previous checkpoint still runs is skipped.\n" +
			"It shows in the Web UI and in `temporal schedule list`, and pauses like any schedule.",
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newScheduleCreateCmd(g), newScheduleDescribeCmd(g), newScheduleListCmd(g),
		newScheduleSetCmd(g, "pause", "Pause the set's checkpoint schedule", func(c *trainer.Client, cmd *cobra.Command, set, arg string) error {
			return c.PauseSchedule(cmd.Context(), set, arg)
		}),
		newScheduleSetCmd(g, "unpause", "Resume the set's checkpoint schedule", func(c *trainer.Client, cmd *cobra.Command, set, arg string) error {
			return c.UnpauseSchedule(cmd.Context(), set, arg)
		}),
		newScheduleSetCmd(g, "trigger", "Take a scheduled checkpoint now (skipped if one still runs)", func(c *trainer.Client, cmd *cobra.Command, set, _ string) error {
			return c.TriggerSchedule(cmd.Context(), set)
		}),
		newScheduleSetCmd(g, "tag", "Set the tag (trainer step, policy version) the next scheduled checkpoints carry", func(c *trainer.Client, cmd *cobra.Command, set, arg string) error {
			return c.SetScheduleTag(cmd.Context(), set, arg)
		}),
		newScheduleSetCmd(g, "delete", "Delete the set's checkpoint schedule (its checkpoints stay)", func(c *trainer.Client, cmd *cobra.Command, set, _ string) error {
			return c.DeleteSchedule(cmd.Context(), set)
		}),
	)
	return cmd
}

func newScheduleCreateCmd(g *globals) *cobra.Command {
	var req trainer.ScheduleRequest
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create the set's checkpoint schedule",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				id, err := c.CreateSchedule(cmd.Context(), req)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "created schedule %s\n", id)
				s, err := c.DescribeSchedule(cmd.Context(), req.Set)
				if err != nil {
					return err
				}
				return g.emit(cmd.OutOrStdout(), s, func(w io.Writer) error { return writeSchedule(w, s) })
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Set, "set", "", "the set to checkpoint")
	f.StringVar(&req.Root, "root", "", "directory the checkpoints go under (made absolute), or a storage URL such as s3://bucket/prefix?region=…")
	f.StringSliceVar(&req.Participants, "participants", nil, "environment server base URLs, comma-separated, in a fixed order")
	f.DurationVar(&req.Every, "every", 0, "interval between checkpoints, e.g. 10m")
	f.DurationVar(&req.Timeout, "timeout", 60*time.Second, "time each cut may take")
	f.StringVar(&req.Tag, "tag", "", "tag each checkpoint carries (trainer step or policy version; change it with: starter schedule tag)")
	f.IntVar(&req.Keep, "keep", 0, "after each checkpoint keep the newest N of the set (and the pinned ones), deleting the others; 0: keep all")
	f.BoolVar(&req.Paused, "paused", false, "create the schedule paused")
	for _, name := range []string{"set", "root", "participants", "every"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// newScheduleSetCmd is a command on one set's schedule; arg is the note
// of a pause or unpause, or the tag of a tag.
func newScheduleSetCmd(g *globals, use, short string, do func(c *trainer.Client, cmd *cobra.Command, set, arg string) error) *cobra.Command {
	var set, arg string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				if err := do(c, cmd, set, arg); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: schedule %s\n", use, trainer.ScheduleID(set))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&set, "set", "", "the set whose schedule it is")
	_ = cmd.MarkFlagRequired("set")
	switch use {
	case "pause", "unpause":
		cmd.Flags().StringVar(&arg, "note", "", "why (shown with the schedule)")
	case "tag":
		cmd.Flags().StringVar(&arg, "tag", "", "the new tag (empty: none)")
	}
	return cmd
}

func newScheduleDescribeCmd(g *globals) *cobra.Command {
	var set string
	cmd := &cobra.Command{
		Use:   "describe",
		Short: "Describe the set's checkpoint schedule",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				s, err := c.DescribeSchedule(cmd.Context(), set)
				if err != nil {
					return err
				}
				return g.emit(cmd.OutOrStdout(), s, func(w io.Writer) error { return writeSchedule(w, s) })
			})
		},
	}
	cmd.Flags().StringVar(&set, "set", "", "the set whose schedule it is")
	_ = cmd.MarkFlagRequired("set")
	return cmd
}

func newScheduleListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List every checkpoint schedule",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				list, err := c.ListSchedules(cmd.Context())
				if err != nil {
					return err
				}
				if list == nil {
					list = []trainer.Schedule{}
				}
				return g.emit(cmd.OutOrStdout(), list, func(w io.Writer) error {
					for i, s := range list {
						if i > 0 {
							fmt.Fprintln(w)
						}
						if err := writeSchedule(w, s); err != nil {
							return err
						}
					}
					return nil
				})
			})
		},
	}
}

// writeSchedule prints s as an aligned two-column table.
func writeSchedule(w io.Writer, s trainer.Schedule) error {
	return writeTable(w, [][2]string{
		{"schedule", s.ID},
		{"set", s.Set},
		{"every", s.Every.String()},
		{"tag", orDash(s.Tag)},
		{"keep", fmt.Sprint(s.Keep)},
		{"paused", fmt.Sprint(s.Paused)},
		{"note", orDash(s.Note)},
		{"fired", fmt.Sprint(s.Fired)},
		{"skipped", fmt.Sprint(s.Skipped)},
		{"recent", orDash(strings.Join(s.Recent, " "))},
	})
}
