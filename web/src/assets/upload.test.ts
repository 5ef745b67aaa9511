import { describe, expect, it } from "vitest";
import { uploadProblem } from "./upload";

describe("uploadProblem", () => {
  it("keeps the server's problem, its code and detail", () => {
    const body = JSON.stringify({
      type: "about:blank",
      title: "Payload too large",
      status: 413,
      detail: "The file is larger than 50 MiB.",
      code: "payload_too_large",
    });
    const error = uploadProblem(413, body);
    expect(error.status).toBe(413);
    expect(error.problem.code).toBe("payload_too_large");
    expect(error.message).toBe("The file is larger than 50 MiB.");
  });

  it("says something useful for a body that is not a problem", () => {
    expect(uploadProblem(502, "<html>Bad gateway</html>").message).toBe("HTTP 502");
    expect(uploadProblem(0, "").message).toBe("The upload was interrupted (network error).");
  });
});
