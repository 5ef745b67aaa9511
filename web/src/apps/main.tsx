// The visitor's own entry (app.html): an app's page (/apps/<slug>) and the gallery of public
// apps (/gallery). React and these pages only, no editor, router or canvas, so a visitor's
// phone downloads a few kilobytes besides React.
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import "./app.css";
import { AppPage } from "./AppPage";
import { Gallery } from "./Gallery";
import { slugOf } from "./visitor";

const path = window.location.pathname;

createRoot(document.getElementById("root") as HTMLElement).render(
  <StrictMode>
    {path.replace(/\/$/, "") === "/gallery" ? <Gallery /> : <AppPage slug={slugOf(path)} />}
  </StrictMode>,
);
