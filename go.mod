module github.com/turnstile-rl/turnstile

go 1.26
