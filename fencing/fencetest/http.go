package fencetest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"

	"github.com/ahrtr/disco/fencing"
)

// HTTPAPI says how to write to and read from an HTTP resource. The kit adds
// the token headers (fencing.HTTPHeader, and on a Keyed resource
// fencing.ScopeHTTPHeader) to every request.
type HTTPAPI struct {
	// Write returns the request that writes value in scope ("" on a
	// resource that is not Keyed), without token headers. Its URL may be a
	// path alone ("/orders/42"); httptest.NewRequest makes such requests.
	// The resource answers 2xx if it applied the write. Other statuses are
	// refusals: 409 is a stale token (fencing.ErrTokenStale), 403 a token
	// of another scope, 400 a malformed token, 428 a missing one, as
	// guard's middleware answers; 500, 502 and 504 leave the outcome
	// unknown (a failing handler or a proxy may answer them after the
	// write was applied); any other is ErrRefused (a guard answers 503
	// before its handler runs).
	Write func(scope, value string) *http.Request
	// Read returns the request that reads scope. The resource answers 2xx
	// with the value as the body, or 404 if nothing was written there.
	Read func(scope string) *http.Request
}

// HTTPHandler returns the Resource that the handler start returns serves,
// in-process: each request goes straight to its ServeHTTP. start is called
// now, and again at each Restart: it must build the handler as a newly
// started process would (a new guard, its mark read from wherever the
// resource keeps it durably), never return one built before. If the
// resource keeps nothing across a restart (its data lives in memory too),
// set the Resource's Restart to nil.
func HTTPHandler(start func() http.Handler, api HTTPAPI) Resource {
	s := &handlerServer{start: start}
	s.h = start()
	send := func(ctx context.Context, req *http.Request) (int, string, error) {
		s.mu.RLock()
		h := s.h
		s.mu.RUnlock()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(ctx))
		return rec.Code, rec.Body.String(), nil
	}
	r := httpResource(api, send)
	r.Restart = s.restart
	return r
}

type handlerServer struct {
	start func() http.Handler
	mu    sync.RWMutex
	h     http.Handler
}

func (s *handlerServer) restart(context.Context) error {
	h := s.start()
	s.mu.Lock()
	s.h = h
	s.mu.Unlock()
	return nil
}

// HTTPServer returns the Resource served at baseURL (for example
// "http://127.0.0.1:8080"), reached through client. A nil client is one of
// the kit's own that keeps no idle connections. Requests whose URL is a path
// alone are sent under baseURL (under its path too: "/orders/42" under
// "http://127.0.0.1:8080/api" is "http://127.0.0.1:8080/api/orders/42"). To check restarts, set the Resource's Restart
// to a function that restarts the server at the same address.
func HTTPServer(baseURL string, client *http.Client, api HTTPAPI) Resource {
	if client == nil {
		client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	}
	base, err := url.Parse(baseURL)
	send := func(ctx context.Context, req *http.Request) (int, string, error) {
		if err != nil {
			return 0, "", fmt.Errorf("fencetest: base URL %q: %w", baseURL, err)
		}
		out := req.Clone(ctx)
		out.URL = underBase(base, req.URL)
		out.Host = ""
		out.RequestURI = "" // set by httptest.NewRequest; a client must not send it
		resp, err := client.Do(out)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return 0, "", fmt.Errorf("reading the answer of %s %s: %w", out.Method, out.URL, err)
		}
		return resp.StatusCode, string(body), nil
	}
	return httpResource(api, send)
}

// underBase returns u, or, for a u that is a path alone, u under base's
// path: "/orders/42?a" under "http://h/api/" is "http://h/api/orders/42?a".
func underBase(base, u *url.URL) *url.URL {
	if u.IsAbs() || u.Host != "" {
		return u
	}
	out := *base
	escaped := strings.TrimSuffix(base.EscapedPath(), "/") + "/" + strings.TrimPrefix(u.EscapedPath(), "/")
	if p, err := url.PathUnescape(escaped); err == nil {
		out.Path, out.RawPath = p, escaped // RawPath keeps an escaped "/" escaped
	}
	out.RawQuery, out.Fragment = u.RawQuery, ""
	return &out
}

// httpResource is the Resource of api whose requests send sends.
func httpResource(api HTTPAPI, send func(ctx context.Context, req *http.Request) (code int, body string, err error)) Resource {
	return Resource{
		Write: func(ctx context.Context, r Request) error {
			req := api.Write(r.Scope, r.Value)
			stamp(req, r)
			code, body, err := send(ctx, req)
			if err != nil {
				return err
			}
			return httpRefusal(code, body)
		},
		Read: func(ctx context.Context, r Request) (string, error) {
			req := api.Read(r.Scope)
			stamp(req, r)
			code, body, err := send(ctx, req)
			switch {
			case err != nil:
				return "", err
			case code == http.StatusNotFound:
				return "", nil
			case code/100 != 2:
				return "", fmt.Errorf("fencetest: read: HTTP %d: %s", code, strings.TrimSpace(body))
			}
			return body, nil
		},
	}
}

// stamp sets the token headers of req as r says, raw: the kit sends
// malformed tokens too.
func stamp(req *http.Request, r Request) {
	if req.Header == nil {
		req.Header = make(http.Header)
	}
	req.Header.Del(fencing.HTTPHeader)
	req.Header.Del(fencing.ScopeHTTPHeader)
	if r.Token != "" {
		req.Header.Set(fencing.HTTPHeader, r.Token)
	}
	if r.TokenScope != "" {
		req.Header.Set(fencing.ScopeHTTPHeader, fencing.EncodeScope(r.TokenScope))
	}
}

// httpRefusal is the error of a write answered with code: nil for 2xx.
func httpRefusal(code int, body string) error {
	if code/100 == 2 {
		return nil
	}
	reason := ErrRefused
	switch code {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout:
		// The write may or may not have been applied.
		return fmt.Errorf("fencetest: write: HTTP %d: %s", code, strings.TrimSpace(body))
	case http.StatusConflict:
		reason = fencing.ErrTokenStale
	case http.StatusForbidden:
		reason = fencing.ErrWrongScope
	case http.StatusBadRequest:
		reason = fencing.ErrMalformedToken
	case http.StatusPreconditionRequired:
		reason = fencing.ErrNoToken
	}
	body = strings.TrimSuffix(strings.TrimSpace(body), reason.Error()) // the guard's bodies end with it
	return fmt.Errorf("HTTP %d: %s%w", code, body, reason)
}
