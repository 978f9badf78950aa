package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Output formats of -o: text for people, json for scripts (`meshchaos list -o json | jq`).
const (
	outputText = "text"
	outputJSON = "json"
)

// outputFlag registers -o/--output on cmd into format, default text.
func outputFlag(cmd *cobra.Command, format *string) {
	cmd.Flags().StringVarP(format, "output", "o", outputText, "output format: text or json (json on stdout only; progress stays on stderr)")
}

// checkOutput refuses a format other than text and json; commands call it before doing anything.
func checkOutput(format string) error {
	switch format {
	case outputText, outputJSON:
		return nil
	}
	return Usagef("--output %q: want text or json", format)
}

// writeJSON writes v to w as one indented JSON document and a newline.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode JSON output: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
