// docs.js starts Swagger UI on the OpenAPI document this server serves. The
// document's servers name --public-url, which may be another host; "Try it
// out" must call the API on the origin this page came from, so the document
// is fetched here and handed over with that origin as its only server.
"use strict";

(async () => {
  const root = document.getElementById("swagger-ui");
  const api = window.location.origin + "/v1";
  try {
    const resp = await fetch(api + "/openapi.json", { headers: { Accept: "application/json" } });
    if (!resp.ok) {
      throw new Error("GET /v1/openapi.json answered " + resp.status);
    }
    const spec = await resp.json();
    spec.servers = [{ url: api, description: "this server" }];
    root.textContent = "";
    window.ui = SwaggerUIBundle({
      spec,
      domNode: root,
      presets: [SwaggerUIBundle.presets.apis],
      layout: "BaseLayout",
      validatorUrl: null, // nothing leaves this origin
      deepLinking: true,
      displayRequestDuration: true,
      persistAuthorization: false, // the key stays in this page, not in localStorage
    });
  } catch (err) {
    root.textContent = "The API description could not be loaded: " + err.message;
  }
})();
