package main

import (
	"embed"
	"net/http"
)

// The page is one HTML file with its CSS and JavaScript inline: no build
// step, no external assets.
//
//go:embed page/index.html page/inspect.html
var pageFS embed.FS

// pageHandler serves the live page.
func pageHandler() http.Handler { return htmlHandler("page/index.html") }

// inspectorHandler serves the inspector's page.
func inspectorHandler() http.Handler { return htmlHandler("page/inspect.html") }

func htmlHandler(name string) http.Handler {
	body, err := pageFS.ReadFile(name)
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(body)
	})
}
