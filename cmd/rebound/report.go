package main

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"os"
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
	Title      string
	Scenario   string
	Tables     []htmlTable
	Notes      []string
	Config     []configLine
	Conclusion []string
	Charts     []*svgplot.Chart
}

var reportPage = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body { font-family: sans-serif; max-width: 1000px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; }
th, td { padding: 0.25em 0.75em; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
code { font-size: 0.9em; word-break: break-all; }
.config td { text-align: left; vertical-align: top; }
.conclusion { background: #f4f4f4; padding: 0.75em 1em; }
figure { margin: 1em 0; }
svg { max-width: 100%; height: auto; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p style="white-space: pre-line">{{.Scenario}}</p>
<h2>Conclusion</h2>
<p class="conclusion">{{range .Conclusion}}{{.}} {{end}}</p>
{{range .Tables}}<h2>{{.Caption}}</h2>
<table>
{{range $i, $row := .Rows}}<tr>{{range $row}}{{if eq $i 0}}<th>{{.}}</th>{{else}}<td>{{.}}</td>{{end}}{{end}}</tr>
{{end}}</table>
{{end}}{{range .Notes}}<p>{{.}}</p>
{{end}}<h2>Charts</h2>
{{range .SVG}}<figure>{{.}}</figure>
{{end}}<h2>Configuration</h2>
<table class="config">
{{range .Config}}<tr><td>{{.Name}}</td><td><code>{{.Config}}</code></td></tr>
{{end}}</table>
</body>
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

func (r htmlReport) render(w io.Writer) error {
	data := struct {
		htmlReport
		SVG []template.HTML
	}{htmlReport: r}
	for _, c := range r.Charts {
		var b bytes.Buffer
		if _, err := c.WriteTo(&b); err != nil {
			return err
		}
		// svgplot escapes every piece of text it writes, so its output
		// is safe markup.
		data.SVG = append(data.SVG, template.HTML(b.String()))
	}
	return reportPage.Execute(w, data)
}
