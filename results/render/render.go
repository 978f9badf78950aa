package render

import (
	"bytes"
	"embed"
	"fmt"
	htmltemplate "html/template"
	"path/filepath"
	"strings"
	texttemplate "text/template"

	"github.com/meshchaos/meshchaos/results"
)

//go:embed templates/report.md.tmpl templates/report.html.tmpl
var templates embed.FS

var (
	mdTemplate = texttemplate.Must(texttemplate.New("report.md.tmpl").Funcs(texttemplate.FuncMap{
		"md": mdText, "mdcell": mdCell, "join": strings.Join,
	}).ParseFS(templates, "templates/report.md.tmpl"))
	htmlTemplate = htmltemplate.Must(htmltemplate.New("report.html.tmpl").ParseFS(templates, "templates/report.html.tmpl"))
)

// Markdown renders report.md's content.
func Markdown(s *results.Summary, charts []results.Chart) ([]byte, error) {
	var b bytes.Buffer
	if err := mdTemplate.Execute(&b, Build(s, charts)); err != nil {
		return nil, fmt.Errorf("render markdown: %w", err)
	}
	return b.Bytes(), nil
}

// HTML renders report.html's content.
func HTML(s *results.Summary, charts []results.Chart) ([]byte, error) {
	var b bytes.Buffer
	if err := htmlTemplate.Execute(&b, Build(s, charts)); err != nil {
		return nil, fmt.Errorf("render html: %w", err)
	}
	return b.Bytes(), nil
}

// Render writes junit.xml, the charts, report.md and report.html for the summary into dir.
func Render(dir string, s *results.Summary) error {
	if err := results.WriteJUnit(dir, s); err != nil {
		return err
	}
	charts, err := results.RenderCharts(dir, s)
	if err != nil {
		return err
	}
	md, err := Markdown(s, charts)
	if err != nil {
		return err
	}
	if err := results.WriteFileAtomic(filepath.Join(dir, results.MarkdownFile), md); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	h, err := HTML(s, charts)
	if err != nil {
		return err
	}
	if err := results.WriteFileAtomic(filepath.Join(dir, results.HTMLFile), h); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// mdText writes a Text as Markdown.
func mdText(t Text) string {
	var b strings.Builder
	for _, s := range t {
		switch {
		case s.Break:
			b.WriteString("<br>")
		case s.Code:
			b.WriteString("`" + s.S + "`")
		case s.Strong:
			b.WriteString("**" + s.S + "**")
		case s.Link != "":
			fmt.Fprintf(&b, "[%s](%s)", s.S, s.Link)
		default:
			b.WriteString(s.S)
		}
	}
	return b.String()
}

// mdCell writes a Text as one Markdown table cell: on one line, pipes escaped.
func mdCell(t Text) string {
	return results.MarkdownCell(mdText(t))
}
