// Small building blocks shared by the pages: an action that reports its failure, the error
// banner, a one-field "name it and create" form, a copy button and a table head.
import { useCallback, useState } from "react";
import { ApiError } from "../api/client";

export function messageOf(exc: unknown): string {
  if (exc instanceof ApiError) return exc.message;
  return exc instanceof Error ? exc.message : String(exc);
}

/** Runs an action; a failure is kept as the message to show, not thrown. */
export function useAction() {
  const [error, setError] = useState<string | null>(null);
  const act = useCallback(async (action: () => Promise<unknown>): Promise<boolean> => {
    setError(null);
    try {
      await action();
      return true;
    } catch (exc) {
      setError(messageOf(exc));
      return false;
    }
  }, []);
  return { error, setError, act };
}

export function ErrorBanner({ error }: { error: string | null }) {
  if (!error) return null;
  return (
    <div className="banner error" role="alert">
      {error}
    </div>
  );
}

export function NameForm({
  id,
  label,
  placeholder,
  value,
  onChange,
  onSubmit,
  submitLabel,
  disabled = false,
  children,
}: {
  id: string;
  label: string;
  placeholder: string;
  value: string;
  onChange: (value: string) => void;
  onSubmit: () => void;
  submitLabel: string;
  disabled?: boolean;
  children?: React.ReactNode;
}) {
  return (
    <form
      className="row card"
      onSubmit={(e) => {
        e.preventDefault();
        onSubmit();
      }}
    >
      <div className="grow">
        <label htmlFor={id}>{label}</label>
        <input
          id={id}
          value={value}
          placeholder={placeholder}
          onChange={(e) => onChange(e.target.value)}
        />
      </div>
      {children}
      <button
        type="submit"
        className="primary"
        style={{ alignSelf: "flex-end" }}
        disabled={disabled}
      >
        {submitLabel}
      </button>
    </form>
  );
}

/** "Copy": puts the text on the clipboard and says so. */
export function CopyButton({
  text,
  onError,
}: {
  text: string;
  onError: (message: string) => void;
}) {
  const [copied, setCopied] = useState(false);
  return (
    <>
      <button
        type="button"
        onClick={async () => {
          try {
            await navigator.clipboard.writeText(text);
            setCopied(true);
          } catch {
            onError("The browser refused the clipboard; select the text and copy it by hand.");
          }
        }}
      >
        Copy
      </button>
      {copied && (
        <span className="small" role="status">
          Copied
        </span>
      )}
    </>
  );
}

export function TableHead({ columns, actions = false }: { columns: string[]; actions?: boolean }) {
  return (
    <thead>
      <tr>
        {columns.map((c) => (
          <th key={c}>{c}</th>
        ))}
        {actions && (
          <th>
            <span className="sr-only">Actions</span>
          </th>
        )}
      </tr>
    </thead>
  );
}
