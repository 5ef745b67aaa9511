import { describe, expect, it } from "vitest";
import { privateHost } from "./privateAddress";

describe("privateHost", () => {
  it("names the hosts the server refuses unless allowed", () => {
    for (const url of [
      "http://127.0.0.1:8188",
      "http://localhost:8188",
      "http://192.168.1.20:8188",
      "http://10.0.0.5",
      "http://172.20.1.1",
      "http://[::1]:8188",
      "http://gpu-box:8188",
      "http://gpu-box.lan",
    ]) {
      expect(privateHost(url), url).not.toBeNull();
    }
    expect(privateHost("http://127.0.0.1:8188")).toBe("127.0.0.1");
  });

  it("leaves public hosts and unfinished URLs alone", () => {
    for (const url of ["https://api.openai.com/v1", "http://8.8.8.8", "http://172.32.0.1", "htt"]) {
      expect(privateHost(url), url).toBeNull();
    }
  });
});
