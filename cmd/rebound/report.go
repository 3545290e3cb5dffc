package main

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/rebound-go/rebound/internal/svgplot"
)

// leaders returns the indexes of the best of n values and of those within
// tie of it, best first; higher values are better when higher is set.
func leaders(n int, value func(i int) float64, higher bool, tie float64) []int {
	if n == 0 {
		return nil
	}
	v := func(i int) float64 {
		if higher {
			return value(i)
		}
		return -value(i)
	}
	best := 0
	for i := 1; i < n; i++ {
		if v(i) > v(best) {
			best = i
		}
	}
	out := []int{best}
	for i := range n {
		if i != best && v(best)-v(i) <= tie {
			out = append(out, i)
		}
	}
	return out
}

// joinAnd joins "a", "b" and "c" as "a, b and c".
func joinAnd(s []string) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// writeTable writes rows as aligned columns, the first left-aligned and the
// others right-aligned.
func writeTable(w io.Writer, rows [][]string) {
	var width []int
	for _, r := range rows {
		for i, cell := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(cell))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		for i, cell := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(cell))
			if i == 0 {
				b.WriteString(cell + pad)
				continue
			}
			b.WriteString("  " + pad + cell)
		}
		fmt.Fprintln(w, b.String())
	}
}

// wrap breaks s into lines of at most width characters at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for _, word := range strings.Fields(s) {
		l := utf8.RuneCountInString(word)
		switch {
		case n == 0:
		case n+1+l > width:
			b.WriteString("\n")
			n = 0
		default:
			b.WriteString(" ")
			n++
		}
		b.WriteString(word)
		n += l
	}
	return b.String()
}

// conclusion is what a command concludes from its numbers: one headline
// per question it answers (success, latency, load), then the detail.
type conclusion struct {
	Headlines []string
	Detail    []string
}

// print writes the conclusion for a terminal: the headlines one per line,
// then the detail wrapped at 100 columns.
func (c conclusion) print(w io.Writer) {
	if len(c.Headlines) > 0 {
		fmt.Fprintln(w, "Conclusion:")
		for _, h := range c.Headlines {
			fmt.Fprintf(w, "  %s\n", wrapIndent(h, 98, "    "))
		}
	}
	if len(c.Detail) > 0 {
		fmt.Fprintf(w, "\n%s\n", wrap(strings.Join(c.Detail, " "), 100))
	}
}

// wrapIndent wraps s at width, indenting the lines after the first.
func wrapIndent(s string, width int, indent string) string {
	return strings.ReplaceAll(wrap(s, width), "\n", "\n"+indent)
}

// configLine is one policy and the configuration it ran with.
type configLine struct{ Name, Config string }

// htmlTable is a table of results under a heading.
type htmlTable struct {
	Caption string
	Rows    [][]string // headings first
}

// htmlReport is one self-contained page: everything a command printed and
// drew, with the charts inline, to open in a browser.
type htmlReport struct {
	Title string
	// Scenario is the paragraphs that describe the run.
	Scenario   []string
	Conclusion conclusion
	Tables     []htmlTable
	Notes      []string
	Config     []configLine
	Charts     []svgplot.Figure
}

// The page reads at any width from a phone's to a desktop's: text wraps to
// the window, a table too wide scrolls within its own box rather than
// being cut off, and configs break only between JSON tokens.
var reportPage = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font-family: sans-serif; max-width: 1000px; margin: 2em auto; padding: 0 1em; color: #222; line-height: 1.4; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.95em; }
th, td { padding: 0.25em 0.6em; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
code { font-size: 0.9em; overflow-wrap: anywhere; }
.config td { text-align: left; vertical-align: top; white-space: normal; }
.config td:first-child { white-space: nowrap; }
.conclusion { background: #f4f4f4; padding: 0.75em 1em; }
.conclusion ul { margin: 0; padding-left: 1.2em; }
.conclusion li { margin: 0.2em 0; }
.conclusion p { margin: 0.75em 0 0; }
figure { margin: 1em 0; }
svg { max-width: 100%; height: auto; }
@media (max-width: 800px) {
  table { font-size: 0.8em; }
  th, td { padding: 0.2em 0.35em; }
}
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{range .Scenario}}<p>{{.}}</p>
{{end}}{{if or .Conclusion.Headlines .Conclusion.Detail}}<h2>Conclusion</h2>
<div class="conclusion">
{{with .Conclusion.Headlines}}<ul>
{{range .}}<li>{{.}}</li>
{{end}}</ul>
{{end}}{{range .Conclusion.Detail}}<p>{{.}}</p>
{{end}}</div>
{{end}}{{range .TablesHTML}}<h2>{{.Caption}}</h2>
<div class="scroll"><table>
<tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table></div>
{{end}}{{range .Notes}}<p>{{.}}</p>
{{end}}{{with .SVG}}<h2>Charts</h2>
{{range .}}<figure>{{.}}</figure>
{{end}}{{end}}{{with .ConfigHTML}}<h2>Configuration</h2>
<table class="config">
{{range .}}<tr><td>{{.Name}}</td><td><code>{{.Config}}</code></td></tr>
{{end}}</table>
{{end}}</body>
</html>
`))

// write writes the page to path.
func (r htmlReport) write(path string) error {
	var b bytes.Buffer
	if err := r.render(&b); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// configHTML is a configLine whose config may break only after a JSON
// token that ends a value or a member: "," "{" "[" ":".
type configHTML struct {
	Name   string
	Config template.HTML
}

// breakable escapes s for HTML and marks the places after the characters
// of after where a line may break (<wbr>): a narrow window then breaks a
// config between JSON tokens, never inside a field name, and a column
// heading such as "goodput/s" after its slash.
func breakable(s, after string) template.HTML {
	var b strings.Builder
	for _, r := range s {
		b.WriteString(template.HTMLEscapeString(string(r)))
		if strings.ContainsRune(after, r) {
			b.WriteString("<wbr>")
		}
	}
	return template.HTML(b.String())
}

// tableHTML is an htmlTable ready for the page: headings that may break
// after "/" and "-", then the rows.
type tableHTML struct {
	Caption string
	Head    []template.HTML
	Rows    [][]string
}

func (r htmlReport) render(w io.Writer) error {
	data := struct {
		htmlReport
		TablesHTML []tableHTML
		SVG        []template.HTML
		ConfigHTML []configHTML
	}{htmlReport: r}
	for _, t := range r.Tables {
		th := tableHTML{Caption: t.Caption}
		if len(t.Rows) > 0 {
			for _, h := range t.Rows[0] {
				th.Head = append(th.Head, breakable(h, "/-"))
			}
			th.Rows = t.Rows[1:]
		}
		data.TablesHTML = append(data.TablesHTML, th)
	}
	for _, c := range r.Charts {
		var b bytes.Buffer
		if _, err := c.WriteTo(&b); err != nil {
			return err
		}
		// svgplot escapes every piece of text it writes, so its output
		// is safe markup.
		data.SVG = append(data.SVG, template.HTML(b.String()))
	}
	for _, c := range r.Config {
		data.ConfigHTML = append(data.ConfigHTML, configHTML{c.Name, breakable(c.Config, ",{[:")})
	}
	return reportPage.Execute(w, data)
}

// checkWritable returns an error if a file cannot be written at path, so
// that a command fails before a long run rather than after it. It leaves
// nothing behind: the file, if it exists, is opened for writing but not
// changed, and a probe file made beside it is removed.
func checkWritable(path string) error {
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return fmt.Errorf("%s is a directory", path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		return f.Close()
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".rebound-probe-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			// The probe's own name would only confuse.
			return fmt.Errorf("cannot create %s: %v", path, pe.Err)
		}
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// writeFigures writes figures, one below the other, as one SVG file.
func writeFigures(path string, figures ...svgplot.Figure) error {
	var b bytes.Buffer
	if _, err := svgplot.WriteStacked(&b, figures...); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
